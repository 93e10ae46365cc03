"""`fragviz run -- python train.py ARGS`: an unchanged script, with the live agent started first.

Under torchrun every rank is its own process: each serves on PORT + LOCAL_RANK and says so on stderr.
"""
from __future__ import annotations

import os
import runpy
import sys

from fragviz.errors import UsageError
from fragviz.units import format_bytes


def script_and_args(command: list[str], verb: str) -> list[str]:
    """`-- python script.py ARGS` (or `script.py ARGS`) -> [script.py, ARGS...]."""
    if command and command[0] == "--":
        command = command[1:]
    if command and os.path.basename(command[0]).startswith("python"):
        command = command[1:]
    if not command or not command[0].endswith(".py"):
        raise UsageError(f"{verb} runs a Python script: fragviz {verb} [options] -- python script.py ARGS")
    return command


def agent_port(port: int) -> int:
    """PORT + LOCAL_RANK under torchrun (port 0 stays 0: any free port)."""
    local = os.environ.get("LOCAL_RANK", "")
    return port + int(local) if port and local.isdigit() else port


def run_script(command: list[str], port: int, host: str, token: str | None, device_memory: int | None,
               alloc_conf: str | None, simulate: bool | None, max_entries: int, linger: float) -> int:
    """Run the script under the agent; the script's exit status, 1 for an uncaught exception."""
    from fragviz.live.agent import start_agent

    argv = script_and_args(command, "run")
    if alloc_conf is not None:
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = alloc_conf  # before CUDA initialises
    agent = start_agent(agent_port(port), host, token, max_entries=max_entries, simulate=simulate,
                        device_memory=device_memory, alloc_conf=alloc_conf, root_file=argv[0], linger=linger)
    _announce(agent)
    saved = sys.argv
    sys.argv = argv
    try:
        runpy.run_path(argv[0], run_name="__main__")
        return 0
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except Exception as exc:  # the job's own failure, an OOM above all: report it as Python would, briefly
        first = str(exc).splitlines()[0] if str(exc) else ""
        print(f"fragviz: {argv[0]} failed: {type(exc).__name__}: {first}", file=sys.stderr, flush=True)
        return 1
    finally:
        sys.argv = saved
        agent.stop(linger)


def _announce(agent) -> None:
    ranks = agent.ranks
    who = f"rank {ranks['rank']} (local rank {ranks['local_rank']}), " if ranks["rank"] is not None else ""
    source = agent.source
    what = (f"a simulated CUDA device of {format_bytes(source.capacity)} (CPU tensors mirrored into "
            "fragviz's allocator model)" if source.simulated else "the CUDA caching allocator")
    print(f"fragviz: live agent for {who}pid {os.getpid()} serving {what} on {agent.url}", file=sys.stderr,
          flush=True)
