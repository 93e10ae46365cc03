"""`fragviz run`: its arguments, and a parser of `run` alone.

`fragviz run` starts every live job, so its own start is part of the job's: `fragviz run ...` parses its
command line with `run_only_parser()`, which loads nothing but argparse and the live protocol's constants
(the full parser loads every command's module), then becomes the job's `python` (fragviz.live.runner).
"""
from __future__ import annotations

import argparse
import os

from fragviz.live.protocol import DEFAULT_RUN_PORT

DEBUG_HELP = "show the traceback of an internal error"


def workload_arguments(p: argparse.ArgumentParser) -> None:
    """What `capture` and `run` share: the simulated device, the allocator settings, the script."""
    p.add_argument("--device-memory", metavar="SIZE", help="simulated device size without CUDA (default 16GiB)")
    p.add_argument("--alloc-conf", metavar="CONF", help="PYTORCH_CUDA_ALLOC_CONF for the run")
    p.add_argument("--simulate", action="store_true", help="simulate even where CUDA is available")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- python script.py ARGS")


def add_run(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    run = sub.add_parser("run", help="run a Python script with the live agent serving its memory on a port",
                         description="fragviz run [options] -- python train.py ARGS. The agent serves /v1/stats, "
                         "/v1/snapshot, /v1/oom and /metrics; under torchrun each rank serves on PORT + LOCAL_RANK. "
                         "Without CUDA the script's CPU tensors are mirrored into a simulated CUDA device.")
    run.add_argument("--port", type=int, default=DEFAULT_RUN_PORT, help=f"port to serve on (default "
                     f"{DEFAULT_RUN_PORT}; 0: any free port). When it is taken the agent serves on the next free "
                     "one and says so; the job runs either way")
    run.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1; any other needs a token)")
    run.add_argument("--token", help="token clients must send as Authorization: Bearer (default $FRAGVIZ_TOKEN)")
    run.add_argument("--max-entries", type=int, default=100_000, help="trace entries kept (a ring buffer)")
    run.add_argument("--linger", type=float, default=10.0, help="seconds to wait at exit for a poller to fetch "
                     "an OOM snapshot (default 10)")
    workload_arguments(run)
    run.set_defaults(run=cmd_run)
    return run


def run_only_parser() -> argparse.ArgumentParser:
    """The `fragviz` command's parser with `run` alone (what `fragviz run ...` needs, and nothing more)."""
    from fragviz import __version__

    p = argparse.ArgumentParser(prog="fragviz")
    p.add_argument("--version", action="version", version=f"fragviz {__version__}")
    p.add_argument("--debug", dest="debug_errors", action="store_true", help=DEBUG_HELP)
    sub = p.add_subparsers(dest="command")
    add_run(sub).add_argument("--debug", dest="debug_errors", action="store_true", default=argparse.SUPPRESS,
                              help=DEBUG_HELP)
    return p


def cmd_run(args: argparse.Namespace) -> int:
    from fragviz.base.units import parse_size
    from fragviz.live.runner import run_command

    memory = parse_size(args.device_memory) if args.device_memory else None
    token = args.token or os.environ.get("FRAGVIZ_TOKEN") or None
    return run_command(list(args.command), args.port, args.host, token, memory, args.alloc_conf,
                       True if args.simulate else None, args.max_entries, args.linger)
