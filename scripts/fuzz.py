#!/usr/bin/env python3
"""The long fuzz run: the hostile, gzip and JSON corpora once, then generated inputs until time is up.

    python scripts/fuzz.py --minutes 10 --seed 1 --out fuzz-findings
    python scripts/fuzz.py --minutes 10 --seed 1 --out fuzz-findings --atheris   # coverage-guided (atheris)

Every input goes through tests/fuzz/harness.py (ingest into a real store, load, analyze, report, doctor;
worker processes under an address-space limit and a deadline). Each distinct failure is cut down to a
minimal reproducer, written to --out as NN-<kind>.bin with NN-<kind>.txt saying what failed and where.
Exit status: 0 when nothing failed, 1 when something did.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)  # run as a file from scripts/: the repository's root, where the tests package is
REAL = os.path.normpath(os.path.join(REPO, "..", "shared", "real_snapshots"))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0, help="how long to generate inputs (default 10)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the generated inputs (default 0)")
    ap.add_argument("--out", default="fuzz-findings", help="folder for the minimal reproducers")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 2, help="worker processes (default: CPUs)")
    ap.add_argument("--deadline", type=float, default=20.0, help="seconds an input may take (default 20)")
    ap.add_argument("--memory-gb", type=float, default=3.0, help="address space of a worker (default 3)")
    ap.add_argument("--batch", type=int, default=400, help="generated inputs per batch (default 400)")
    ap.add_argument("--no-corpus", action="store_true", help="skip the hostile, gzip and JSON corpora")
    ap.add_argument("--real", default=REAL, help="the real snapshots (default ../shared/real_snapshots)")
    ap.add_argument("--atheris", action="store_true", help="coverage-guided with atheris (pip install atheris)")
    ap.add_argument("--atheris-child", action="store_true", help=argparse.SUPPRESS)
    args, _ = ap.parse_known_args(argv)  # the atheris child gets libFuzzer's flags after --
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.atheris_child:
        return atheris_child(args)
    if args.atheris:
        return run_atheris(args)
    return run_hypothesis(args)


# The plain run: corpora, then hypothesis batches ---------------------------------------------------
def run_hypothesis(args: argparse.Namespace) -> int:
    sys.stdout.reconfigure(errors="backslashreplace")  # inputs' names and messages can hold lone surrogates
    from tests.fuzz.harness import Pool, group

    pool = Pool(args.real, workers=args.workers, deadline=args.deadline,
                memory_limit=int(args.memory_gb * (1 << 30)))
    outcomes: list = []
    started = time.monotonic()
    last = [started]

    def progress(o) -> None:
        outcomes.append(o)
        if time.monotonic() - last[0] > 30:
            last[0] = time.monotonic()
            print(status_line(outcomes, started), flush=True)

    try:
        if not args.no_corpus:
            from tests.fuzz import gzip_cases, hostile, json_cases, strategies

            corpus = (hostile.all_cases(args.real) + gzip_cases.cases() + json_cases.cases()
                      + strategies.seed_cases(args.real))
            print(f"corpus: {len(corpus)} hostile, gzip, JSON and seed inputs", flush=True)
            pool.run(corpus, progress)
            print(status_line(outcomes, started), flush=True)
        deadline = started + args.minutes * 60
        batch = 0
        while time.monotonic() < deadline:
            pool.run(generated(args, batch), progress, stop=lambda: time.monotonic() >= deadline)
            batch += 1
        print(status_line(outcomes, started), flush=True)
        groups = group(outcomes)
        write_findings(args, pool, groups)
    finally:
        pool.cleanup()
    print(f"done: {len(outcomes)} inputs in {(time.monotonic() - started) / 60:.1f} min, "
          f"{sum(1 for o in outcomes if o.failures)} failed, {len(groups)} distinct failures; reproducers in {args.out}")
    return 1 if groups else 0


def generated(args: argparse.Namespace, batch: int):
    """Structured and byte-mutated inputs of one batch, interleaved (drawn in the feeder thread as the batch starts)."""
    from tests.fuzz import strategies

    seed = args.seed * 100_003 + batch
    structured = strategies.structured_cases(args.real, args.batch * 3 // 5, seed)
    mutated = strategies.byte_cases(args.real, args.batch * 2 // 5, seed)
    for i in range(max(len(structured), len(mutated))):
        if i < len(structured):
            yield structured[i]
        if i < len(mutated):
            yield mutated[i]


def status_line(outcomes: list, started: float) -> str:
    from tests.fuzz.harness import group

    failed = sum(1 for o in outcomes if o.failures)
    return (f"[{(time.monotonic() - started) / 60:5.1f} min] inputs run: {len(outcomes)}, failed: {failed}, "
            f"distinct failures: {len(group(outcomes))}")


def write_findings(args: argparse.Namespace, pool, groups: dict) -> None:
    from tests.fuzz.minimize import minimize

    os.makedirs(args.out, exist_ok=True)
    summary = []
    for n, (sig, items) in enumerate(groups.items(), 1):
        outcome, failure = items[0]
        check = lambda case: pool.workers[0].run(case)  # noqa: E731 - one worker, one input at a time
        small = minimize(outcome.case, sig, check, max_runs=150, max_seconds=60)
        slug = f"{n:02d}-{slugify('-'.join(x for x in sig[:3] if x))}"
        path = os.path.join(args.out, slug)
        if len(small.data) <= 1 << 20:
            with open(path + ".bin", "wb") as fh:
                fh.write(small.data)
        with open(path + ".txt", "w", errors="backslashreplace") as fh:
            fh.write(describe(sig, items, outcome, small))
        summary.append({"signature": list(sig), "count": len(items), "example": outcome.case.name,
                        "bytes": len(small.data), "failure": failure.describe(), "file": slug})
        print(f"- [{len(items)}x] {failure.describe()}\n    reproducer: {path}.bin ({len(small.data)} bytes, "
              f"from {outcome.case.name})", flush=True)
    with open(os.path.join(args.out, "summary.json"), "w") as fh:
        json.dump(summary, fh, indent=1)


def describe(sig: tuple, items: list, outcome, small) -> str:
    lines = [f"signature: {' | '.join(sig)}", f"seen: {len(items)} inputs", f"first example: {outcome.case.name}",
             f"reproducer: {len(small.data)} bytes (the .bin beside this file, when under 1 MiB)", "failures:"]
    lines += [f"  {f.describe()}" for f in outcome.failures]
    lines += ["", "reproduce: python -m fragviz report THE.bin   (or: fragviz ingest --db /tmp/x.sqlite THE.bin)"]
    if small.recipe is not None:
        lines += ["", "as written: " + small.recipe.label(), "tree (repr, cut to 4000 chars):",
                  repr(small.recipe.tree)[:4000]]
    return "\n".join(lines) + "\n"


def slugify(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-")[:60]


# Atheris: coverage-guided, in a child process under libFuzzer's own limits ------------------------
def run_atheris(args: argparse.Namespace) -> int:
    try:
        import atheris  # noqa: F401
    except ImportError:
        print("atheris is not installed: pip install atheris==3.0.0 (a manylinux wheel, no compiler needed)")
        return 2
    import subprocess
    import tempfile

    from tests.fuzz import strategies

    os.makedirs(args.out, exist_ok=True)
    corpus = tempfile.mkdtemp(prefix="fragviz-atheris-")
    for i, (name, enc, data) in enumerate(strategies.encoded_seeds(args.real)):
        if enc != "gzip-inner":
            with open(os.path.join(corpus, f"{i:03d}-{name}-{enc}"), "wb") as fh:
                fh.write(data)
    canary = tempfile.mkdtemp(prefix="fragviz-atheris-canary-")
    env = dict(os.environ, FRAGVIZ_FUZZ_CANARY_DIR=canary, OPENBLAS_NUM_THREADS="1")
    cmd = [sys.executable, os.path.abspath(__file__), "--atheris-child", "--real", args.real, "--",
           f"-max_total_time={int(args.minutes * 60)}", f"-seed={args.seed or 1}",
           f"-rss_limit_mb={int(args.memory_gb * 1024)}", f"-timeout={int(args.deadline)}",
           f"-artifact_prefix={os.path.abspath(args.out)}/", "-print_final_stats=1", corpus]
    print("running:", " ".join(cmd), flush=True)
    return subprocess.call(cmd, env=env)


def atheris_child(args: argparse.Namespace) -> int:
    import atheris

    with atheris.instrument_imports(include=["fragviz"]):
        import fragviz.replay.analysis  # noqa: F401
        import fragviz.doctor  # noqa: F401
        import fragviz.library.ingest  # noqa: F401
        import fragviz.doctor.report  # noqa: F401
    import shutil
    import tempfile

    from tests.fuzz import canary  # noqa: F401
    from tests.fuzz.harness import BASELINE_SNAPSHOT, _Checker
    from tests.fuzz.hostile import register_extensions

    from fragviz.library.ingest import ingest_file
    from fragviz.store.engine import open_store

    register_extensions()
    work = tempfile.mkdtemp(prefix="fragviz-atheris-store-")
    baseline = os.path.join(work, "baseline.sqlite")
    conn = open_store(baseline)
    ingest_file(conn, os.path.join(args.real, BASELINE_SNAPSHOT))
    conn.close()
    canary_dir = canary.canary_dir()

    def one(data: bytes) -> None:
        checker = _Checker(baseline, work, "full")
        checker.run(data, "atheris.pickle")
        ran = os.listdir(canary_dir)
        if ran:
            raise AssertionError(f"code from the input ran: {ran}")
        if checker.failures:
            raise AssertionError("; ".join(f.describe() for f in checker.failures))

    argv = [sys.argv[0]] + sys.argv[sys.argv.index("--") + 1:]
    atheris.Setup(argv, one)
    try:
        atheris.Fuzz()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
