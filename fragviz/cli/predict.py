"""`fragviz predict`: the memory of a bigger run predicted from recordings of the same program at smaller sizes."""
from __future__ import annotations

import argparse
import json
import math
import sys

from fragviz.base.errors import UsageError


def cmd_predict(args: argparse.Namespace) -> int:
    from fragviz.allocator.config import parse_alloc_conf
    from fragviz.base.units import parse_size
    from fragviz.cli.explain import analysis_for
    from fragviz.predict import fit_search, plan_recordings, predict, settings_for
    from fragviz.predict.text import fit_text, prediction_text

    knobs = _knobs(args)
    memory = parse_size(args.device_memory) if args.device_memory else None
    fit_memory = parse_size(args.fit) if args.fit else None
    confs = [(c, parse_alloc_conf(c)) for c in args.alloc_conf]  # a bad setting fails before the files are read
    say = _say(args.json)
    analyses = []
    for n, recording in enumerate(args.recordings, 1):
        say(f"reading {recording} ({n} of {len(args.recordings)})")
        analyses.append(analysis_for(recording, args.db))
    say("matching the recordings and fitting the laws")
    fitted = plan_recordings(analyses, knobs, args.to, args.device, args.max_unmatched)
    settings = settings_for(fitted, analyses, confs)
    prediction = None
    if args.to is not None:
        say(f"simulating {args.knob} {args.to:g} under {len(settings)} setting(s)")
        prediction = predict(fitted, args.to, settings, memory, args.knob)
    answers = [fit_search(fitted, conf, s, fit_memory, say) for conf, s in settings] if fit_memory else []
    if args.json:
        out = prediction.as_dict() if prediction else {}
        if answers:
            out["fit"] = [a.as_dict() for a in answers]
        print(json.dumps(out))
        return 0
    if prediction:
        print(prediction_text(prediction))
    if answers:
        print(fit_text(args.knob, answers))
    return 0


def _say(quiet: bool):
    """Progress on stderr, one line per step (none with --json: a script reads stdout alone either way)."""
    if quiet:
        return lambda _text: None
    return lambda text: print(f"predict: {text}", file=sys.stderr, flush=True)


def _knobs(args: argparse.Namespace) -> list[float]:
    if len(args.recordings) < 2:
        raise UsageError("predict needs two recordings or more (the same program at two sizes of one knob)")
    if len(args.sizes) != len(args.recordings):
        raise UsageError(f"--sizes gives {len(args.sizes)} sizes for {len(args.recordings)} recordings: give one "
                         "per recording, in their order")
    if len(set(args.sizes)) != len(args.sizes):
        raise UsageError("--sizes: each recording must be at a different size")
    if any(not math.isfinite(s) or s <= 0 for s in [*args.sizes, *([args.to] if args.to is not None else [])]):
        raise UsageError("--sizes and --to must be finite numbers above 0")
    if args.to is None and args.fit is None:
        raise UsageError("predict needs --to SIZE (the size to predict) or --fit MEMORY (the largest size that fits)")
    if not 0 <= args.max_unmatched <= 1:
        raise UsageError("--max-unmatched is a share between 0 and 1")
    return args.sizes


def add_predict(sub: argparse._SubParsersAction, db_help: str) -> None:
    pr = sub.add_parser("predict", help="predict a bigger run's memory from two recordings at smaller sizes",
                        description="fragviz predict SMALL MID --sizes S1 S2 --to S3: two recordings of one program "
                        "at two sizes of one knob (batch, sequence length, hidden size; a third recording sharpens the "
                        "laws); each allocation's size fitted as a law of the knob, the program written at S3 and "
                        "free-run through the allocator model.")
    pr.add_argument("recordings", nargs="+", metavar="RECORDING", help="snapshot files or store ids, smallest first")
    pr.add_argument("--sizes", nargs="+", type=float, required=True, metavar="S",
                    help="the knob's value in each recording, in their order")
    pr.add_argument("--to", type=float, metavar="S", help="the knob's value to predict")
    pr.add_argument("--fit", metavar="MEMORY", help="search the largest whole knob value whose run fits a device of "
                    "this size, under each --alloc-conf")
    pr.add_argument("--device-memory", metavar="SIZE", help="with --to: the device's memory, to tell whether the "
                    "predicted run runs out of memory, and where")
    pr.add_argument("--alloc-conf", action="append", default=[], metavar="CONF",
                    help="PYTORCH_CUDA_ALLOC_CONF to simulate under (repeatable; default: the recorded settings)")
    pr.add_argument("--knob", default="size", help="what the sizes measure, for the text (batch, seq, ...)")
    pr.add_argument("--device", type=int, help="the device to predict (default: the traced one)")
    pr.add_argument("--max-unmatched", type=float, default=0.10, metavar="SHARE",
                    help="refuse when more than this share of the recorded bytes does not match (default 0.10)")
    pr.add_argument("--db", help=db_help)
    pr.add_argument("--json", action="store_true", help="print one JSON object")
    pr.set_defaults(run=cmd_predict)
