"""bench/bench_jobs.py --quick end to end, as a subprocess against the test PostgreSQL server: it runs, prints
every figure and target, and drops the databases it made. No timing is asserted (the machine is shared)."""
from __future__ import annotations

import os
import subprocess
import sys

import psycopg
from sqlalchemy.engine import make_url

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PG = os.environ.get("FRAGVIZ_TEST_PG", "postgresql://fragviz:fragviz@127.0.0.1:5432/fragviz")
FIGURES = [
    "(a) one by one into SQLite (CLI)", "(b) --job, 2 workers, PostgreSQL", "(c) --job, 2 workers, SQLite",
    "(d) --job, 1 worker, PostgreSQL", "ranks/min", "events/s", "server CPU",
    "where one rank's ingest goes", "SQLite      read", "PostgreSQL  read",
    "PostgreSQL, 2 workers vs 1: speed-up", "a writer waited on another's lock in", "SQLite stores one rank at a time",
    "W workers take about (d) / W", "per-rank table p50", "whole page layout with its chart p50",
    "job page in Chromium, navigation until every row shows: first",
    "state at a random event, PostgreSQL: p50", "state at a random event, SQLite: p50",
]
TARGETS = ["(b) / (a) ingest wall", "job page per-rank table p95", "state at a random event p95, PostgreSQL"]


def databases_named(prefix: str) -> list[str]:
    url = make_url(PG)
    with psycopg.connect(host=url.host, port=url.port or 5432, user=url.username, password=url.password,
                         dbname=url.database, connect_timeout=10) as conn:
        return [r[0] for r in conn.execute("SELECT datname FROM pg_database WHERE datname LIKE %s", (prefix + "%",))]


def test_bench_jobs_quick_prints_every_figure_and_cleans_up():
    proc = subprocess.Popen([sys.executable, "bench/bench_jobs.py", "--quick", "--url", PG], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    out, err = proc.communicate(timeout=900)
    assert proc.returncode in (0, 1), err  # 1: a target missed, which the machine's load can cause
    assert "job: 4 ranks x 5,000 events" in out
    for figure in FIGURES:
        assert figure in out, f"{figure!r} missing from:\n{out}"
    for target in TARGETS:
        line = next((line for line in out.splitlines() if line.strip().startswith(target)), None)
        assert line is not None and "(target <= " in line and ("meets" in line or "MISSES" in line), out
    assert databases_named(f"fragviz_bench_jobs_{proc.pid}_") == []
