"""`fragviz gate`: a candidate run's memory checked against budgets and a baseline; the exit status is the verdict."""
from __future__ import annotations

import argparse
import json
import os
import sys

from fragviz.base.errors import FragvizError


def cmd_gate(args: argparse.Namespace) -> int:
    from fragviz.gate.budgets import budgets_from_text, gate_command
    from fragviz.gate.inputs import read_sides
    from fragviz.gate.judge import cannot_judge, judge
    from fragviz.gate.report import gate_junit, gate_markdown, gate_text

    budgets = budgets_from_text(args.max_peak_reserved, args.max_peak_allocated, args.max_growth,
                                args.max_fragmentation, args.device_memory, args.alloc_conf)
    try:
        candidate, baseline = read_sides(args.candidate, args.baseline, args.db, budgets)
    except FragvizError as exc:  # a side that cannot be read: the gate cannot judge, and every report says why
        result = cannot_judge(str(exc), budgets)
    else:
        if args.write_summary:
            _write(args.write_summary, candidate.summary.to_json())
        result = judge(candidate.summary, baseline.summary if baseline else None, budgets, candidate.fits)
    command = gate_command(args.candidate, args.baseline, budgets, args.db)
    markdown = gate_markdown(result, command)
    if args.markdown:
        _write(args.markdown, markdown)
    if os.environ.get("GITHUB_STEP_SUMMARY"):
        with open(os.environ["GITHUB_STEP_SUMMARY"], "a", encoding="utf-8") as fh:
            fh.write(markdown + "\n")
    if args.junit:
        _write(args.junit, gate_junit(result))
    print(json.dumps(result.as_dict()) if args.json else gate_text(result))
    return result.exit_code


def _write(path: str, text: str) -> None:
    from fragviz.base.files import write_atomically

    write_atomically(path, text)
    print(f"wrote {path}", file=sys.stderr)
