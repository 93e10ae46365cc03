"""A real PostgreSQL server for the tests: each store is a database of its own, made and dropped here.

The server is FRAGVIZ_TEST_PG's (a URL whose role may create databases), by default the one `.ci/run` starts.
Tests that need it fail, never skip, when it cannot be reached: CI must run them.
"""
from __future__ import annotations

import itertools
import os
import uuid

import psycopg
from sqlalchemy.engine import make_url

from bench.bench_jobs import drop_database as drop_named

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
    with _admin() as conn:
        drop_named(conn, make_url(url).database)


ENGINES = ("sqlite", "postgresql")


def new_store_target(engine: str, folder) -> str:
    """Where a test's store lives: a SQLite file in `folder`, or a fresh PostgreSQL database (its URL)."""
    return str(folder / "store.sqlite") if engine == "sqlite" else new_database()


def drop_store_target(target: str) -> None:
    if "://" in target:
        drop_database(target)
