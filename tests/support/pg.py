"""A real PostgreSQL server for the tests: each store is a database of its own, made and dropped here.

The server is FRAGVIZ_TEST_PG's (a URL whose role may create databases), by default the one `.ci/run` starts.
Tests that need it fail, never skip, when it cannot be reached: CI must run them.
"""
from __future__ import annotations

import itertools
import os
import time
import uuid

import psycopg
from sqlalchemy.engine import make_url

ADMIN_URL = os.environ.get("FRAGVIZ_TEST_PG", "postgresql://fragviz:fragviz@127.0.0.1:5432/fragviz")
_count = itertools.count()


def _admin() -> psycopg.Connection:
    url = make_url(ADMIN_URL)
    return psycopg.connect(host=url.host, port=url.port or 5432, user=url.username, password=url.password,
                           dbname=url.database, autocommit=True, connect_timeout=10)


def new_database() -> str:
    """A fresh, empty database on the test server; its URL."""
    name = f"fragviz_test_{os.getpid()}_{next(_count)}_{uuid.uuid4().hex[:6]}"
    with _admin() as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return make_url(ADMIN_URL).set(database=name).render_as_string(hide_password=False)


def drop_database(url: str) -> None:
    """Drop a test database, ending its sessions. An autovacuum worker (no role) may be analysing the fresh
    tables; a role that is not in pg_signal_backend may not end it, so wait for it and try again."""
    name = make_url(url).database
    with _admin() as conn:
        for attempt in range(60):
            try:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                return
            except psycopg.errors.InsufficientPrivilege:
                if attempt == 59:
                    raise
                time.sleep(0.5)


ENGINES = ("sqlite", "postgresql")


def new_store_target(engine: str, folder) -> str:
    """Where a test's store lives: a SQLite file in `folder`, or a fresh PostgreSQL database (its URL)."""
    return str(folder / "store.sqlite") if engine == "sqlite" else new_database()


def drop_store_target(target: str) -> None:
    if "://" in target:
        drop_database(target)
