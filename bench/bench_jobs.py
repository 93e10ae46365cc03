"""Job benchmark: 64 rank snapshots of 200,000 events each, ingested as one job and read back.

Targets: `fragviz ingest --job` with 2 worker processes into PostgreSQL in <= 0.65x the time of ingesting the
files one by one into SQLite; the job page's per-rank table in <= 500 ms; the state at a random event from
PostgreSQL in <= 50 ms at the 95th percentile. Measured in one run:

  (a) `fragviz ingest FILE1 ... FILEn` (the real CLI, one process, one file after another) into a fresh SQLite
      file: the baseline;
  (b) `fragviz ingest --job bench DIR --workers W` into a fresh PostgreSQL database: the target's run;
  (c) the same into a fresh SQLite file and (d) with one worker into PostgreSQL, to tell where the time goes;
  each with its wall time, the CPU time of the command and its workers (wait4), the PostgreSQL server's CPU
  time over the run (its processes on this machine, anyone's), how often a PostgreSQL writer waited on another's
  lock (pg_stat_activity, sampled), and the rate per rank;
  then a few ranks ingested in-process, one at a time, timing each phase (read, decode, parse, replay, store)
  on each engine: the store phase is what SQLite serialises, and PostgreSQL too where writers wait on each other.

The rank files are written once into bench/out/job_<ranks>x<events>/ and reused: a workload seed per rank (so
each file's content differs), one set of call stacks for all (the ranks of a job run the same code, so their
writers insert the same frames), and two ranks carrying three times the parameters (the job page's outliers).
The bench makes and drops its own databases.

    python bench/bench_jobs.py [--ranks N] [--events E] [--workers W] [--url POSTGRESQL_URL] [--quick]

--url is a PostgreSQL URL whose role may create databases (default $FRAGVIZ_BENCH_PG, else the local server);
--quick is a small run (4 ranks x 5,000 events, fewer queries) for the test that runs this end to end.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import OUT, ROOT, mib, serve  # noqa: E402

DEFAULT_PG = "postgresql://fragviz:fragviz@127.0.0.1/fragviz"
FRAGVIZ = [sys.executable, "-m", "fragviz.cli"]
JOB = "bench"
PHASES = ("read", "decode", "parse", "replay", "store")
TARGET_RATIO, TARGET_TABLE_MS, TARGET_STATE_MS = 0.65, 500, 50
STACK_SEED = 7  # every rank runs the same code: one set of call stacks and frames, as in a real job


def pct(values: list[float], q: float) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))]


# -- the rank files ----------------------------------------------------------------------------------------------
def heavy_ranks(ranks: int) -> set[int]:
    """The ranks that hold three times the parameters: the outliers the job page should show."""
    return {ranks // 4, (3 * ranks) // 4 + 1} if ranks >= 8 else {0}


def write_rank(path: str, events: int, seed: int, params: int) -> None:
    import pickle

    from fragviz.allocator.synth import synthetic_snapshot

    data = synthetic_snapshot(events, seed=seed, depth=10, params=params, stack_seed=STACK_SEED)
    with open(path + ".tmp", "wb") as fh:
        pickle.dump(data, fh, protocol=4)
    os.replace(path + ".tmp", path)


def rank_files(ranks: int, events: int) -> tuple[str, list[str]]:
    """The job's directory and its files (rank_00.pickle ...), written where missing, two at a time."""
    where = os.path.join(OUT, f"job_{ranks}x{events}")
    os.makedirs(where, exist_ok=True)
    paths = [os.path.join(where, f"rank_{r:02d}.pickle") for r in range(ranks)]
    missing = [(p, r) for r, p in enumerate(paths) if not os.path.exists(p)]
    if missing:
        print(f"writing {len(missing)} rank snapshots ({events:,} events each) to {where} ...", flush=True)
        heavy = heavy_ranks(ranks)
        with ProcessPoolExecutor(2, mp_context=get_context("spawn")) as pool:
            for f in [pool.submit(write_rank, p, events, 1000 + r, 600 if r in heavy else 200) for p, r in missing]:
                f.result()
    return where, paths


# -- the stores ----------------------------------------------------------------------------------------------
class Databases:
    """Fresh PostgreSQL databases on the server of `url`, made here and dropped at the end."""

    def __init__(self, url: str) -> None:
        from sqlalchemy.engine import make_url

        self.url = make_url(url)
        self.made: list[str] = []

    def _admin(self):
        import psycopg

        u = self.url
        return psycopg.connect(host=u.host, port=u.port or 5432, user=u.username, password=u.password,
                               dbname=u.database, autocommit=True, connect_timeout=10)

    def new(self, tag: str) -> str:
        name = f"fragviz_bench_jobs_{os.getpid()}_{tag}"
        with self._admin() as conn:
            drop_database(conn, name)
            conn.execute(f'CREATE DATABASE "{name}"')
        self.made.append(name)
        return self.url.set(database=name).render_as_string(hide_password=False)

    def drop_all(self) -> None:
        with self._admin() as conn:
            for name in self.made:
                drop_database(conn, name)


def drop_database(conn, name: str) -> None:
    """DROP DATABASE ... WITH (FORCE), waiting out an autovacuum worker that a role outside pg_signal_backend may
    not end."""
    import psycopg

    for attempt in range(60):
        try:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            return
        except psycopg.errors.InsufficientPrivilege:
            if attempt == 59:
                raise
            time.sleep(0.5)


def server_cpu(url: str) -> float | None:
    """CPU seconds the local PostgreSQL server has used so far: its processes' own and those of the backends
    it has reaped (the postmaster's children's). None where the server is not on this machine."""
    from sqlalchemy.engine import make_url

    if make_url(url).host not in (None, "", "127.0.0.1", "localhost", "::1"):
        return None
    ticks, found = 0, False
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        if stat[stat.index("(") + 1:stat.rindex(")")] != "postgres":
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        ticks += sum(int(x) for x in fields[11:15])  # utime, stime, cutime, cstime
        found = True
    return ticks / os.sysconf("SC_CLK_TCK") if found else None


class LockWatch:
    """Samples pg_stat_activity of one database every INTERVAL seconds while a run goes on: how often one of
    fragviz's writers waited on a lock another holds (two writers inserting the same frames: the second waits
    for the first's commit), and on which statement."""

    INTERVAL = 0.05
    QUERY = ("SELECT left(query, 40) FROM pg_stat_activity WHERE datname = %s AND application_name = 'fragviz' "
             "AND wait_event_type = 'Lock'")

    def __init__(self, url: str) -> None:
        import threading

        from sqlalchemy.engine import make_url

        self.url, self.database = make_url(url), make_url(url).database
        self.samples, self.waiting, self.statements = 0, 0, {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> "LockWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        import psycopg

        u = self.url
        with psycopg.connect(host=u.host, port=u.port or 5432, user=u.username, password=u.password,
                             dbname=u.database, autocommit=True) as conn:
            while not self._stop.wait(self.INTERVAL):
                rows = conn.execute(self.QUERY, (self.database,)).fetchall()
                self.samples += 1
                self.waiting += bool(rows)
                for (statement,) in rows:
                    self.statements[statement] = self.statements.get(statement, 0) + 1

    def text(self) -> str:
        if not self.samples:
            return "no samples"
        top = max(self.statements, key=self.statements.get) if self.statements else None
        return (f"a writer waited on another's lock in {self.waiting / self.samples:.0%} of {self.samples} samples"
                + (f", mostly at {top.split('(')[0].strip()}" if top else ""))


# -- ingest runs ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Run:
    label: str
    wall: float
    cpu: float  # the command's and its (reaped) workers' user + system seconds
    server: float | None  # the PostgreSQL server's CPU seconds over the run
    locks: str | None = None  # what LockWatch saw (PostgreSQL runs)

    def rates(self, ranks: int, events: int) -> str:
        server = "" if self.server is None else f"{self.server:7.1f} s"
        return (f"  {self.label:<38} {self.wall:8.1f} s {self.wall / ranks:7.2f} s {60 * ranks / self.wall:9.1f} "
                f"{events / self.wall:11,.0f} {self.cpu:8.1f} s ({self.cpu / self.wall:.2f}) {server:>10}")


def run_ingest(label: str, argv: list[str], pg_url: str | None) -> Run:
    """Run one ingest command to its end; it must store every rank. `pg_url`: the server to watch, if any."""
    db = argv[argv.index("--db") + 1]
    watch = LockWatch(db) if "://" in db else None
    before = server_cpu(pg_url) if pg_url else None
    start = time.perf_counter()
    with watch or nullcontext():
        proc = subprocess.Popen(FRAGVIZ + argv + ["--no-progress", "--json"], cwd=ROOT, stdout=subprocess.PIPE)
        out = proc.stdout.read().decode() if proc.stdout else ""
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    after = server_cpu(pg_url) if pg_url else None
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{label}: fragviz ingest failed with status {os.waitstatus_to_exitcode(status)}")
    bad = [r for r in json.loads(out) if r["status"] != "ingested"]
    if bad:
        raise SystemExit(f"{label}: {len(bad)} files not ingested, e.g. {bad[0]}")
    server = None if before is None or after is None else after - before
    return Run(label, wall, usage.ru_utime + usage.ru_stime, server, watch.text() if watch else None)


def phase_times(db: str, files: list[str]) -> dict[str, float]:
    """In a child process: each file ingested in turn into `db`, the seconds of each phase summed over them."""
    code = "import sys; from bench.bench_jobs import print_phase_times; print_phase_times(sys.argv[1], sys.argv[2:])"
    out = subprocess.run([sys.executable, "-c", code, db, *files], cwd=ROOT, check=True, stdout=subprocess.PIPE)
    return json.loads(out.stdout)


def print_phase_times(db: str, files: list[str]) -> None:
    from fragviz.library.ingest import ingest_file
    from fragviz.store.engine import open_store

    store = open_store(db)
    totals = dict.fromkeys(PHASES, 0.0)
    for path in files:
        marks: list[tuple[str, float]] = []
        result = ingest_file(store, path, phase=lambda p: marks.append((p, time.perf_counter())))
        marks.append(("end", time.perf_counter()))
        assert result.status == "ingested", result
        for (name, t0), (_, t1) in zip(marks, marks[1:]):
            totals[name] += t1 - t0
    store.close()
    print(json.dumps(totals))


# -- reading back --------------------------------------------------------------------------------------------
def table_times(db: str, repeats: int) -> tuple[list[float], list[float], int]:
    """Seconds to build the job page's per-rank table as the page does (its figures from the store, then the
    table), and the whole page's layout (its chart too); first of each is a cold call. Also the row count."""
    from types import SimpleNamespace

    from fragviz.jobs.table import job_figures_of
    from fragviz.library import Library
    from fragviz.ui.data.compare import CompareViews
    from fragviz.ui.data.views import Views
    from fragviz.ui.pages import job as job_page

    reader = Library.open(db)
    job_id = reader.job_named(JOB).id
    ctx = SimpleNamespace(reader=reader, compare=CompareViews(Views(reader)))  # what the job page reads
    table, page = [], []
    for _ in range(repeats + 1):
        t = time.perf_counter()
        figures = job_figures_of(reader, job_id)
        job_page.ranks_table(figures, "rank", False)
        table.append(time.perf_counter() - t)
        t = time.perf_counter()
        job_page.layout(ctx, f"/jobs/{job_id}")
        page.append(time.perf_counter() - t)
    reader.close()
    return table, page, len(figures.rows)


def browser_times(db: str, rows: int, repeats: int) -> list[float] | str:
    """Seconds from navigation to /jobs/<id> in headless Chromium until the table shows every row (the first
    is the server's first visit); or why it could not be measured."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:
        return f"not measured ({exc})"
    from bench.bench_dashboard import CHROMIUM_ARGS
    from fragviz.library import Library

    job_id = Library.open(db).job_named(JOB).id
    shown = f"document.querySelectorAll('#job-ranks-table tbody tr').length >= {rows}"
    proc, url = serve(db)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            times = []
            for _ in range(repeats + 1):
                start = time.perf_counter()
                page.goto(f"{url}/jobs/{job_id}", wait_until="commit")
                page.wait_for_function(shown, timeout=60000)
                times.append(time.perf_counter() - start)
            browser.close()
    finally:
        proc.terminate()
        proc.wait()
    return times


def state_times(db: str, queries: int, seed: int) -> list[float]:
    """Seconds of Library.device_state at `queries` random (rank, event) of the job's snapshots in `db`; the
    first query (cold) is left out."""
    from fragviz.library import Library

    reader = Library.open(db)
    sids = [r.id for r in reader.list_snapshots()]
    lengths = {sid: reader.trace_length(sid, 0) for sid in sids}
    rng = random.Random(seed)
    times = []
    for _ in range(queries + 1):
        sid = rng.choice(sids)
        k = rng.randrange(lengths[sid] + 1)
        t = time.perf_counter()
        segments, _, _ = reader.device_state(sid, 0, k)
        times.append(time.perf_counter() - t)
        assert segments, "a state with no segments: the synthetic ranks always have some"
    reader.close()
    return times[1:]


# -- the run -------------------------------------------------------------------------------------------------
def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--url", default=os.environ.get("FRAGVIZ_BENCH_PG", DEFAULT_PG),
                    help="PostgreSQL URL whose role may create databases (default $FRAGVIZ_BENCH_PG or the local one)")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--phase-ranks", type=int, default=4, help="ranks ingested in-process to time each phase")
    ap.add_argument("--no-browser", action="store_true", help="skip the job page in Chromium")
    ap.add_argument("--quick", action="store_true", help="4 ranks x 5,000 events, fewer queries (for the test)")
    args = ap.parse_args()
    if args.quick:
        args.ranks, args.events, args.queries, args.repeats, args.phase_ranks = 4, 5_000, 20, 3, 1
    where, files = rank_files(args.ranks, args.events)
    size = sum(os.path.getsize(f) for f in files)
    print(f"job: {args.ranks} ranks x {args.events:,} events ({mib(size)} of pickles in {where}); "
          f"{args.workers} workers; {os.cpu_count()} CPUs; heavier ranks {sorted(heavy_ranks(args.ranks))}", flush=True)
    dbs, work = Databases(args.url), tempfile.mkdtemp(prefix="fragviz-bench-jobs-", dir=OUT)
    try:
        return measure(args, where, files, dbs, work)
    finally:
        dbs.drop_all()
        shutil.rmtree(work, ignore_errors=True)


def measure(args, where: str, files: list[str], dbs: Databases, work: str) -> int:
    w = str(args.workers)
    args.phase_ranks = min(args.phase_ranks, args.ranks)
    lite_a, lite_c, pg_b, pg_d = (os.path.join(work, "a.sqlite"), os.path.join(work, "c.sqlite"),
                                  dbs.new("b"), dbs.new("d"))
    runs = [run_ingest("(a) one by one into SQLite (CLI)", ["ingest", *files, "--db", lite_a], None)]
    print("  " + runs[-1].label + " done", flush=True)
    for label, db, workers in ((f"(b) --job, {w} workers, PostgreSQL", pg_b, w),
                               (f"(c) --job, {w} workers, SQLite", lite_c, w),
                               ("(d) --job, 1 worker, PostgreSQL", pg_d, "1")):
        runs.append(run_ingest(label, ["ingest", "--job", JOB, where, "--workers", workers, "--db", db],
                               args.url if "://" in db else None))
        print("  " + label + " done", flush=True)
    events = _stored_events(pg_b)
    sample = files[:args.phase_ranks]
    phases = {"SQLite": phase_times(os.path.join(work, "phases.sqlite"), sample),
              "PostgreSQL": phase_times(dbs.new("phases"), sample)}
    table, page, rows = table_times(pg_b, args.repeats)
    browser = "skipped (--no-browser)" if args.no_browser else browser_times(pg_b, rows, 3)
    states_pg = state_times(pg_b, args.queries, seed=1)
    states_lite = state_times(lite_a, args.queries, seed=1)
    return report(args, runs, events, phases, (table, page, rows, browser), states_pg, states_lite)


def _stored_events(db: str) -> int:
    from fragviz.library import Library

    reader = Library.open(db)
    total = sum(reader.trace_length(r.snapshot_id, 0) for r in reader.job_named(JOB).ranks)
    reader.close()
    return total


# -- the printout --------------------------------------------------------------------------------------------
def report(args, runs: list[Run], events: int, phases: dict, table_figures, states_pg, states_lite) -> int:
    n = args.ranks
    a, b, c, d = runs
    print(f"ingest of {n} ranks, {events:,} events{'':<6} wall    s/rank ranks/min    events/s    CPU (cores) "
          "server CPU")
    for run in runs:
        print(run.rates(n, events))
    print_phases(phases, args.phase_ranks)
    print_scaling(args, runs, phases)
    table, page, rows, browser = table_figures
    print(f"job page, {rows} rows from PostgreSQL ({args.repeats} runs after a cold one): per-rank table "
          f"p50 {pct(table[1:], .5) * 1e3:.0f} ms, p95 {pct(table[1:], .95) * 1e3:.0f} ms (cold {table[0] * 1e3:.0f} "
          f"ms); whole page layout with its chart p50 {pct(page[1:], .5) * 1e3:.0f} ms, p95 "
          f"{pct(page[1:], .95) * 1e3:.0f} ms")
    if isinstance(browser, str):
        print(f"job page in Chromium: {browser}")
    else:
        print(f"job page in Chromium, navigation until every row shows: first {browser[0]:.2f} s, then "
              f"{', '.join(f'{t:.2f}' for t in browser[1:])} s")
    for name, times in (("PostgreSQL", states_pg), ("SQLite", states_lite)):
        print(f"state at a random event, {name}: p50 {pct(times, .5) * 1e3:.1f} ms, p95 {pct(times, .95) * 1e3:.1f} "
              f"ms, max {max(times) * 1e3:.1f} ms ({len(times)} queries over random ranks)")
    checks = [("(b) / (a) ingest wall", b.wall / a.wall, TARGET_RATIO, ""),
              ("job page per-rank table p95", pct(table[1:], .95) * 1e3, TARGET_TABLE_MS, " ms"),
              ("state at a random event p95, PostgreSQL", pct(states_pg, .95) * 1e3, TARGET_STATE_MS, " ms")]
    ok = True
    for name, value, target, unit in checks:
        ok &= value <= target
        verdict = "meets" if value <= target else "MISSES"
        print(f"  {name:<42} {value:8.2f}{unit:<3} (target <= {target}{unit}: {verdict})")
    return 0 if ok else 1


def print_phases(phases: dict[str, dict[str, float]], count: int) -> None:
    print(f"where one rank's ingest goes (in-process, {count} ranks one at a time, s per rank):")
    for engine, t in phases.items():
        total = sum(t.values())
        parts = ", ".join(f"{p} {t[p] / count:.2f}" for p in PHASES)
        print(f"  {engine:<11} {parts}; total {total / count:.2f} s, store {t['store'] / total:.0%}")


def print_scaling(args, runs: list[Run], phases: dict) -> None:
    """Past this machine, from what was measured: a rank's parse and replay run in parallel on either engine; its
    store phase is serialised on SQLite (the workers queue on its write lock), and on PostgreSQL wherever two
    writers insert the same frames (the second waits for the first's commit): LockWatch tells how often."""
    n, count = args.ranks, args.phase_ranks
    a, b, c, d = runs
    store = {engine: t["store"] / count for engine, t in phases.items()}
    share = {engine: t["store"] / sum(t.values()) for engine, t in phases.items()}
    print(f"scaling (measured here: {args.workers} workers on {os.cpu_count()} CPUs):")
    print(f"  PostgreSQL, {args.workers} workers vs 1: speed-up {d.wall / b.wall:.2f}x "
          f"({d.wall / b.wall / args.workers:.0%} of linear); the command and its workers used {b.cpu / b.wall:.2f} "
          "cores" + ("" if b.server is None else f", the server {b.server / b.wall:.2f} cores "
                     f"({b.server / n:.2f} s CPU per rank)") + f"; {b.locks}")
    print(f"  SQLite, {args.workers} workers vs one by one: speed-up {a.wall / c.wall:.2f}x; (b) PostgreSQL vs (c) "
          f"SQLite, both with {args.workers} workers: speed-up {c.wall / b.wall:.2f}x")
    print(f"  the store phase is {share['SQLite']:.0%} of a rank's ingest on SQLite, {share['PostgreSQL']:.0%} on "
          f"PostgreSQL ({store['SQLite']:.2f} s and {store['PostgreSQL']:.2f} s per rank)")
    print(f"  SQLite stores one rank at a time: {n} x {store['SQLite']:.2f} s = {n * store['SQLite']:.0f} s is a floor "
          f"for any number of workers, (b) / (a) >= {n * store['SQLite'] / a.wall:.2f}")
    pg_floor = n * store["PostgreSQL"]
    print(f"  PostgreSQL, with a core per worker and the server's own: W workers take about (d) / W = {d.wall:.0f} s "
          f"/ W while the writers do not wait on each other: (b) / (a) about "
          + ", ".join(f"{k} workers {d.wall / k / a.wall:.2f}" for k in (4, 8, 16))
          + f"; where their store phases queue (the waits above), {n} x {store['PostgreSQL']:.2f} s = "
          f"{pg_floor:.0f} s is the floor, (b) / (a) >= {pg_floor / a.wall:.2f} (projections from these figures, "
          "not measured past 2 workers)")


if __name__ == "__main__":
    sys.exit(main())
