"""`fragviz ingest`: snapshot files, or a job's ranks, into the store, with progress on the terminal."""
from __future__ import annotations

import argparse
import json
import os
import sys

from fragviz.base.errors import UsageError
from fragviz.base.settings import db_path


def cmd_ingest(args: argparse.Namespace) -> int:
    from fragviz.store.engine import open_store, new_store_guard

    if args.job is not None:
        return cmd_ingest_job(args)
    if args.workers is not None or args.rank is not None:
        raise UsageError("--workers and --rank go with --job")
    if args.name and len(args.files) > 1:
        raise UsageError("--name goes with one file")
    if args.progress_file:
        from fragviz.base.files import check_output

        check_output(args.progress_file, "--progress-file")  # a folder or a missing one: one line, before the store
    path = db_path(args.db)
    with new_store_guard(path) as guard:
        store = open_store(path)
        results = []
        for file in args.files:
            result = ingest_one(store, file, args)
            results.append(result)
            if not args.json:
                print_ingest_line(result, args.debug_errors)
        store.close()
        guard.keep = any(r.status == "ingested" for r in results)
    if args.json:
        print(json.dumps([r.as_dict() for r in results]))
    return worst_status(r.status for r in results)


def ingest_one(store, file: str, args: argparse.Namespace):
    """One file ingested, its progress drawn on the terminal and told to --progress-file and --timings."""
    from fragviz.library.ingest import ingest_file
    from fragviz.base.progress import PhaseClock, ProgressBar, ProgressLog

    bar = ProgressBar(os.path.basename(file)[:28], enabled=args.progress)
    log = ProgressLog(args.progress_file) if args.progress_file else None
    clock = PhaseClock()
    phases, updates, previews = [bar.set_phase, clock.phase], [bar.update], [lambda _: clock.picture()]
    if log is not None:
        phases.append(log.phase), updates.append(log.update), previews.append(log.preview)
    try:
        result = ingest_file(store, file, name=args.name or file, phase=lambda p: [f(p) for f in phases],
                             progress=lambda d, t: [f(d, t) for f in updates],
                             preview=lambda v: [f(v) for f in previews])
    finally:
        bar.close()
        if log is not None:
            log.close()
    if args.timings:
        print(f"{result.file}: {clock.summary()}", file=sys.stderr)
    return result


def cmd_ingest_job(args: argparse.Namespace) -> int:
    """`fragviz ingest --job NAME DIR_OR_GLOB`: every rank in parallel processes (fragviz.jobs.run)."""
    from fragviz.library.ingest import clean_name
    from fragviz.jobs.run import ingest_job, record_job
    from fragviz.base.progress import ProgressBar
    from fragviz.store.engine import open_store, new_store_guard

    if args.name:
        raise UsageError("--name does not go with --job: each rank is stored under its file's path")
    name = clean_name(args.job) if args.job.strip() else None
    if not name:
        raise UsageError("--job needs a name")
    path = db_path(args.db)
    with new_store_guard(path) as guard:
        open_store(path).close()  # the store and its schema, before the workers open it
        bar = ProgressBar(f"job {name}"[:28], enabled=args.progress)
        results = ingest_job(path, args.files, args.rank, args.workers, bar)
        job_id = record_job(path, name, results)
        guard.keep = job_id is not None
    if args.json:
        print(json.dumps([r.as_dict() for r in results]))
    else:
        for r in results:
            if r.id is None and args.debug_errors and r.detail:
                print(r.detail, file=sys.stderr, end="")
            print(r.line() if r.id is not None else f"fragviz: {r.line()}", file=sys.stdout if r.id is not None
                  else sys.stderr)
        if job_id is not None:
            print(f"job {name} (id {job_id}): {sum(r.id is not None for r in results)} of {len(results)} ranks stored")
    return worst_status(r.status for r in results)


def worst_status(statuses) -> int:
    """The exit status of a batch: an internal error first, then bad input, then the store's troubles."""
    from fragviz.library.ingest import EXIT_STATUS

    codes = {EXIT_STATUS[s] for s in statuses}
    return next((c for c in (3, 2, 74, 75) if c in codes), 0)


def print_ingest_line(result, debug: bool = False) -> None:
    if result.id is None:
        if debug and result.detail:
            print(result.detail, file=sys.stderr, end="")
        print(f"fragviz: {result.error}", file=sys.stderr)
    elif result.status == "unchanged":
        print(f"{result.file}: already in the store as snapshot {result.id} (unchanged)")
    else:
        print(f"{result.file}: ingested as snapshot {result.id}")
