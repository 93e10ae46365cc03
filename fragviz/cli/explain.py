"""`fragviz report`, `simulate`, `doctor` and `export`: a snapshot file or a stored snapshot read and explained."""
from __future__ import annotations

import argparse
import json
import os
import sys

from fragviz.base.errors import FragvizError, UsageError
from fragviz.base.settings import db_path


def cmd_report(args: argparse.Namespace) -> int:
    from fragviz.doctor.report import report_of, report_text

    analysis = analysis_for(args.target, args.db)
    if args.json:
        print(json.dumps(report_of(analysis, args.at, args.device).as_dict()))
    else:
        print(report_text(analysis, args.at, args.device))
    return 0


def cmd_simulate(args: argparse.Namespace) -> int:
    from fragviz.simulate import follow, simulated_snapshot, what_if
    from fragviz.simulate.reshape import changes_label
    from fragviz.simulate.text import follow_text, what_if_text
    from fragviz.simulate.whatif import NothingToSimulate, nothing_to_follow
    from fragviz.base.units import parse_size

    changes = code_changes(args)  # a usage error before the file is read
    if args.out:
        from fragviz.base.files import check_output

        check_output(args.out, "--out")
    analysis = analysis_for(args.target, args.db)
    memory = parse_size(args.device_memory) if args.device_memory else None
    if args.alloc_conf is None and not changes:
        if args.out:
            raise UsageError("--out goes with a free-run (--alloc-conf, --scale, --bucket or --paged-kv)")
        # the device's size bounds expandable reservations; a single request larger than it is a certain OOM
        result = follow(analysis, device_total=memory)
        if not any(d.alloc_events for d in result.devices):
            raise NothingToSimulate(nothing_to_follow(analysis))
        print(json.dumps(result.as_dict()) if args.json else follow_text(analysis, result))
        return 0
    # refuses (NothingToSimulate) when no device has a workload, or no device has what a code change touches
    result = what_if(analysis, args.alloc_conf, memory, changes)
    if args.out:
        import pickle

        from fragviz.base.files import write_output

        data = pickle.dumps(simulated_snapshot(analysis, args.alloc_conf, memory, changes), protocol=4)
        if args.out.endswith(".gz"):  # as the name says, as `fragviz capture --out F.pickle.gz` writes
            import gzip

            data = gzip.compress(data, mtime=0)
        write_output(args.out, data, "--out")
    print(json.dumps(result.as_dict()) if args.json else
          what_if_text(analysis, args.alloc_conf, result, changes_label(changes)),
          file=sys.stderr if args.out == "-" else sys.stdout)  # standard output holds the snapshot
    return 0


def code_changes(args: argparse.Namespace) -> list:
    """`simulate`'s code what-ifs, in the order scale, bucket, paged KV."""
    from fragviz.simulate.reshape import parse_bucket, parse_paged_kv, parse_scale

    changes = [parse_scale(t) for t in args.scale] + [parse_bucket(t) for t in args.bucket]
    return changes + ([parse_paged_kv(args.paged_kv)] if args.paged_kv else [])


def cmd_doctor(args: argparse.Namespace) -> int:
    """`doctor`; with --json its refusals are JSON too (an object with an "error" field), on standard output."""
    try:
        return doctor_summary(args) if args.summary is not None else doctor(args)
    except FragvizError as exc:
        if not args.json:
            raise
        print(json.dumps({"error": str(exc), "exit_status": exc.exit_code}))
        return exc.exit_code


def doctor(args: argparse.Namespace) -> int:
    from fragviz.doctor import diagnose, diagnose_message
    from fragviz.doctor.text import doctor_text

    if args.target is None and not args.message:
        raise UsageError("doctor needs a snapshot (FILE_OR_ID), --message TEXT or --summary FILE")
    if args.target is None:
        ooms = diagnose_message(args.message, job_pid=args.pid)
        source = "the message"
    else:
        analysis = analysis_for(args.target, args.db)
        ooms = diagnose(analysis, args.message, simulate=not args.no_simulate, strict_device=True,
                        job_pid=args.pid)
        source = analysis.snapshot.source
    if args.message and not any(o.event is None for o in ooms):
        raise UsageError("--message holds no CUDA out-of-memory message fragviz can read")
    if args.json:
        print(json.dumps({"ooms": [o.as_dict() for o in ooms]}))
    else:
        print(doctor_text(source, ooms))
    return 0


def doctor_summary(args: argparse.Namespace) -> int:
    """`doctor --summary FILE`: the table's findings, with the snapshot and the OOM message where given (an OOM
    message in the same text counts as --message)."""
    from fragviz.doctor import diagnose, diagnose_message
    from fragviz.doctor.message import find_messages
    from fragviz.doctor.summary import parse_summary, read_summary_text
    from fragviz.doctor.summary_checks import message_device
    from fragviz.doctor.summary_text import diagnose_summary, summary_text
    from fragviz.doctor.text import doctor_text

    text = read_summary_text(args.summary, sys.stdin.buffer)
    message = args.message or "\n".join(find_messages(text)) or None
    summary = parse_summary(text, "<stdin>" if args.summary == "-" else args.summary, message_device(message))
    analysis = analysis_for(args.target, args.db) if args.target is not None else None
    ooms = diagnose(analysis, message, simulate=not args.no_simulate, strict_device=True, job_pid=args.pid) if (
        analysis is not None) else (diagnose_message(message, job_pid=args.pid) if message else [])
    if args.message and not any(o.event is None for o in ooms):
        raise UsageError("--message holds no CUDA out-of-memory message fragviz can read")
    result = diagnose_summary(summary, analysis, message, ooms, text)
    if args.json:
        print(json.dumps({**result.as_dict(), "ooms": [o.as_dict() for o in ooms]}))
    else:
        print(summary_text(result) + ("\n" + doctor_text(summary.source, ooms) if ooms else ""))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from fragviz.library.export import ExportRequest, check_destination, save, snapshot_file_name, snapshot_frame
    from fragviz.library import Library

    check_destination(args.out, args.format)
    reader = Library.open(db_path(args.db))
    request = ExportRequest(args.what, args.device, args.at)
    frame = snapshot_frame(reader, args.id, request)
    where = save(frame, args.format, args.out or snapshot_file_name(reader, args.id, args.what, args.format),
                 sys.stdout)
    print(f"wrote {len(frame):,} rows ({args.what} of snapshot {args.id}, {args.format}) to {where}",
          file=sys.stderr if args.out == "-" else sys.stdout)
    return 0


def analysis_for(target: str, db: str | None):
    from fragviz.replay.files import analyze_file

    if os.path.exists(target):
        return analyze_file(target)
    if target.isdigit():
        from fragviz.library import Library

        return Library.open(db_path(db)).load_analysis(int(target))
    raise UsageError(f"{target}: no such file, and not a snapshot id")
