"""`fragviz gate`: a candidate run's memory checked against budgets and a baseline; the exit status is the verdict
(0 every budget holds, 1 one is broken, 2 the gate cannot judge; an internal error is 3, as for every command)."""
from __future__ import annotations

import argparse
import json
import os
import sys

from fragviz.base.errors import FragvizError
from fragviz.base.files import STDOUT


def cmd_gate(args: argparse.Namespace) -> int:
    from fragviz.gate.budgets import budgets_from_text, gate_command
    from fragviz.gate.inputs import read_sides
    from fragviz.gate.judge import cannot_judge, judge
    from fragviz.gate.report import gate_junit, gate_markdown, gate_text

    budgets = budgets_from_text(args.max_peak_reserved, args.max_peak_allocated, args.max_growth,
                                args.max_fragmentation, args.device_memory, args.alloc_conf)
    to_stdout = _check_outputs(args)  # a folder or a missing one, refused before the runs are read
    try:
        candidate, baseline = read_sides(args.candidate, args.baseline, args.db, budgets)
    except FragvizError as exc:  # a side that cannot be read: the gate cannot judge, and every report says why
        result = cannot_judge(str(exc), budgets)
    else:
        if args.write_summary:
            _write(args.write_summary, candidate.summary.to_json(), "--write-summary")
        result = judge(candidate.summary, baseline.summary if baseline else None, budgets, candidate.fits)
    command = gate_command(args.candidate, args.baseline, budgets, args.db)
    markdown = gate_markdown(result, command)
    if args.markdown:
        _write(args.markdown, markdown, "--markdown")
    if os.environ.get("GITHUB_STEP_SUMMARY"):
        from fragviz.base.files import append_text

        append_text(os.environ["GITHUB_STEP_SUMMARY"], markdown + "\n", "$GITHUB_STEP_SUMMARY")
    if args.junit:
        _write(args.junit, gate_junit(result), "--junit")
    verdict = json.dumps(result.as_dict()) if args.json else gate_text(result)
    print(verdict, file=sys.stderr if to_stdout else sys.stdout)  # a report on standard output: the verdict beside
    return result.exit_code


def _check_outputs(args: argparse.Namespace) -> bool:
    """Refuse an output that cannot be written; whether one of them is standard output (-, /dev/stdout)."""
    from fragviz.base.files import check_output, own_descriptor

    given = [(args.write_summary, "--write-summary"), (args.markdown, "--markdown"), (args.junit, "--junit")]
    for path, label in given:
        if path:
            check_output(path, label)
    return any(path and (path == STDOUT or own_descriptor(path) == 1) for path, _ in given)


def _write(path: str, text: str, label: str) -> None:
    from fragviz.base.files import write_output

    where = write_output(path, text, label)
    print(f"wrote {where}", file=sys.stderr)
