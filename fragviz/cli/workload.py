"""`fragviz capture` and `attach`: a running workload recorded, or polled into the store (`run`: run.py)."""
from __future__ import annotations

import argparse
import os
import sys

from fragviz.base.errors import OutputError
from fragviz.base.files import check_output
from fragviz.base.settings import db_path


def cmd_capture(args: argparse.Namespace) -> int:
    import runpy

    from fragviz.live.runner import script_and_args

    command = script_and_args(list(args.command), "capture")
    check_output(args.out, "--out")  # a folder, or a missing one, refused before the script runs
    if args.alloc_conf is not None:
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = args.alloc_conf  # before CUDA initialises
    from fragviz.allocator.recorder import capture
    from fragviz.base.units import parse_size

    memory = parse_size(args.device_memory) if args.device_memory else None
    saved_argv = sys.argv
    sys.argv = command
    status = 0
    try:
        script = command[0]
        with capture(args.out, memory, args.alloc_conf, simulate=True if args.simulate else None, root_file=script):
            # The script's globals live on until the snapshot is taken, as a script's do until the interpreter
            # exits (run_path's module is a cycle: when the collector runs would otherwise decide).
            script_globals = runpy.run_path(script, run_name="__main__")  # noqa: F841
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except OutputError:  # the snapshot could not be written: one line from the command line, not the script's
        raise
    except Exception as exc:  # the workload's own failure (an OOM above all): the snapshot is still written
        print(f"fragviz: {command[0]} failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
              file=sys.stderr)
        status = 1
    finally:
        sys.argv = saved_argv
    print(f"snapshot written to {'standard output' if args.out == '-' else args.out}", file=sys.stderr)
    return status


def cmd_attach(args: argparse.Namespace) -> int:
    from fragviz.live.poller import attach_command
    from fragviz.base.units import parse_duration

    token = args.token or os.environ.get("FRAGVIZ_TOKEN") or None
    duration = parse_duration(args.duration) if args.duration else None
    return attach_command(db_path(args.db), args.targets, token, parse_duration(args.interval),
                          parse_duration(args.snapshot_every), duration)
