"""The `fragviz` command: ingest snapshots into the store and report on files or stored snapshots."""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Sequence

from fragviz import __version__
from fragviz.errors import FragvizError, UsageError
from fragviz.settings import SETTINGS, db_path


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        return args.run(args)
    except FragvizError as exc:
        print(f"fragviz: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("fragviz: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fragviz", description="See and explain CUDA caching-allocator "
                                "fragmentation in PyTorch memory snapshots.")
    p.add_argument("--version", action="version", version=f"fragviz {__version__}")
    sub = p.add_subparsers(dest="command")
    db_help = f"{SETTINGS['db'].help} (default ${SETTINGS['db'].env} or {SETTINGS['db'].default})"

    ing = sub.add_parser("ingest", help="ingest snapshot files into the store")
    ing.add_argument("files", nargs="+", metavar="FILE")
    ing.add_argument("--db", help=db_help)
    ing.add_argument("--json", action="store_true", help="print one JSON list of results")
    ing.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                     help="draw a progress bar (default: when stderr is a terminal)")
    ing.set_defaults(run=_cmd_ingest)

    rep = sub.add_parser("report", help="summarise a snapshot file or a stored snapshot")
    rep.add_argument("target", metavar="FILE_OR_ID")
    rep.add_argument("--db", help=db_help)
    rep.add_argument("--at", type=int, metavar="K", help="state after the first K trace events")
    rep.add_argument("--device", type=int, metavar="N", help="only this device")
    rep.add_argument("--json", action="store_true", help="print one JSON object")
    rep.set_defaults(run=_cmd_report)
    return p


def _cmd_ingest(args: argparse.Namespace) -> int:
    from fragviz.ingest import ingest_file
    from fragviz.progress import ProgressBar
    from fragviz.store.schema import connect

    conn = connect(db_path(args.db))
    results = []
    for path in args.files:
        bar = ProgressBar(os.path.basename(path)[:28], enabled=args.progress)
        result = ingest_file(conn, path, name=path, phase=bar.set_phase, progress=bar.update)
        bar.close()
        results.append(result)
        if not args.json:
            _print_ingest_line(result)
    conn.close()
    if args.json:
        print(json.dumps([r.as_dict() for r in results]))
    return 2 if any(r.status == "error" for r in results) else 0


def _print_ingest_line(result) -> None:
    if result.status == "error":
        print(f"fragviz: {result.error}", file=sys.stderr)
    elif result.status == "unchanged":
        print(f"{result.file}: already in the store as snapshot {result.id} (unchanged)")
    else:
        print(f"{result.file}: ingested as snapshot {result.id}")


def _cmd_report(args: argparse.Namespace) -> int:
    from fragviz.report import report_dict, report_text

    analysis = _analysis_for(args.target, args.db)
    if args.json:
        print(json.dumps(report_dict(analysis, args.at, args.device)))
    else:
        print(report_text(analysis, args.at, args.device))
    return 0


def _analysis_for(target: str, db: str | None):
    from fragviz.analysis import analyze
    from fragviz.snapshot import load_snapshot

    if os.path.exists(target):
        return analyze(load_snapshot(target))
    if target.isdigit():
        from fragviz.store.reader import StoreReader

        return StoreReader(db_path(db)).load_analysis(int(target))
    raise UsageError(f"{target}: no such file, and not a snapshot id")


if __name__ == "__main__":
    sys.exit(main())
