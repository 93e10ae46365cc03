"""`fragviz run -- python [options] train.py ARGS`: the job, unchanged, with the live agent started first.

fragviz does not run the script itself: it becomes the `python` command (execve: the same process id), with
its boot folder first on PYTHONPATH. Python imports that folder's `sitecustomize` at start, which starts the
agent (`boot`) and puts PYTHONPATH and sys.path back; then Python runs the script, `-m` module or `-c` command
as it always does: sys.argv, sys.path[0], __main__, a traceback, the exit status and signals are Python's own.
Under torchrun every rank is its own process: each serves on PORT + LOCAL_RANK and says so on stderr.
"""
from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass
from typing import Any

from fragviz.base.errors import UsageError
from fragviz.base.units import cut


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


# What `fragviz run` hands to the interpreter it starts: the agent's settings (read and removed by the boot).
SPEC_VARIABLE = "FRAGVIZ_RUN"
BOOT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "boot")
_PYTHON = re.compile(r"python(\d+(\.\d+)*)?(\.exe)?")
_WITH_VALUE = "XW"  # short options whose value follows (-X dev, -Wd)
_SWITCHING_OFF = {"I": "-I (isolated mode)", "E": "-E (ignore PYTHON* variables)", "S": "-S (no site module)"}


@dataclass(frozen=True)
class PythonCommand:
    """A command line as `python` takes it: the interpreter, its options, and what it runs (a script, -m
    module, -c command or - for standard input) with that target's arguments; `script` is the script's path."""
    interpreter: str
    argv: list[str]
    script: str | None


def python_command(command: list[str]) -> PythonCommand:
    """`-- python [options] (script | -m module | -c command | -) ARGS`, or `-- script.py ARGS` for python."""
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise UsageError("run needs a command: fragviz run [options] -- python train.py ARGS")
    first = command[0]
    if _PYTHON.fullmatch(os.path.basename(first)):
        # a bare name is the interpreter fragviz runs in (the training environment fragviz is installed in)
        interpreter = sys.executable if os.path.basename(first) == first else first
        rest = command[1:]
    elif first.endswith(".py"):
        interpreter, rest = sys.executable, command
    else:
        raise UsageError(f"run starts Python, not '{cut(first, 60)}': fragviz run [options] -- python train.py ARGS")
    return PythonCommand(interpreter, [interpreter, *rest], _target(rest))


def _target(args: list[str]) -> str | None:
    """The script `args` run (None for -m, -c, - or options only), after checking no option turns the agent off."""
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "-" or not arg.startswith("-"):
            return None if arg == "-" else arg
        if arg.startswith("--"):
            i += 2 if arg == "--check-hash-based-pycs" else 1
            continue
        for j, flag in enumerate(arg[1:], 1):
            if flag in _SWITCHING_OFF:
                raise UsageError(f"fragviz run starts its agent through PYTHONPATH and the site module, which "
                                 f"{_SWITCHING_OFF[flag]} turns off")
            if flag in "mc":
                return None
            if flag in _WITH_VALUE:
                i += 0 if j < len(arg) - 1 else 1
                break
        i += 1
    return None


def run_command(command: list[str], port: int, host: str, token: str | None, device_memory: int | None,
                alloc_conf: str | None, simulate: bool | None, max_entries: int, linger: float) -> int:
    """Become `python ...` with the agent started at its start (the boot folder's sitecustomize): the same
    process, sys.argv, sys.path, __main__, traceback, exit status and signals as `python ...` alone. What is
    wrong on the command line stops here, before the job; nothing found later stops the job."""
    from fragviz.live.protocol import check_host

    cmd = python_command(command)
    token = token or None
    check_host(host, token)
    if not 0 <= agent_port(port) <= 65535:
        raise UsageError(f"--port {port} is not a port (0 to 65535; under torchrun, PORT + LOCAL_RANK)")
    if alloc_conf is not None:
        from fragviz.allocator.config import parse_alloc_conf

        parse_alloc_conf(alloc_conf)
    spec = {"port": agent_port(port), "host": host, "token": token, "device_memory": device_memory,
            "alloc_conf": alloc_conf, "simulate": simulate, "max_entries": max_entries, "linger": linger,
            "root_file": os.path.abspath(cmd.script) if cmd.script else None,
            "pythonpath": os.environ.get("PYTHONPATH"), "fragviz_root": _fragviz_root(cmd.interpreter),
            "server_python": sys.executable}
    env = dict(os.environ)
    env[SPEC_VARIABLE] = json.dumps(spec)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (BOOT_DIR, spec["fragviz_root"], spec["pythonpath"]) if p)
    if alloc_conf is not None:
        env["PYTORCH_CUDA_ALLOC_CONF"] = alloc_conf  # before CUDA initialises
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(cmd.interpreter, cmd.argv, env)
    except OSError as exc:
        raise UsageError(f"cannot start {cmd.interpreter}: {exc.strerror or exc}") from None
    return 0  # not reached: the process is the job now


def _fragviz_root(interpreter: str) -> str | None:
    """The folder holding fragviz, for an interpreter other than fragviz's own (it may not have it installed)."""
    if os.path.abspath(interpreter) == os.path.abspath(sys.executable):
        return None
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# What the agent needs in the job's interpreter besides the standard library and torch (the allocator model
# imports numpy); checked at start, so an interpreter without it is told at once, not when the job imports torch
AGENT_NEEDS = ("numpy",)


def boot(spec: dict[str, Any]) -> None:
    """In the job's interpreter, before its script: the agent's server started (it says where it serves),
    and the agent's source made when the job imports torch (a script that never does imports no torch and
    almost nothing of fragviz). An interpreter that cannot run the agent ends here with one line and exit 2;
    anything else that goes wrong leaves the job to run without the agent, with one line saying so."""
    import importlib.util

    missing = [name for name in AGENT_NEEDS if importlib.util.find_spec(name) is None]
    if missing:
        print(f"fragviz: the live agent cannot start in {sys.executable}: it needs {', '.join(missing)}, which "
              "that interpreter does not have (install it there, or run `fragviz run -- python ...` to use "
              "fragviz's own)", file=sys.stderr, flush=True)
        os._exit(2)
    try:
        _start(spec)
    except Exception as exc:
        print(f"fragviz: the live agent could not start ({type(exc).__name__}: {exc}): the job runs without it",
              file=sys.stderr, flush=True)


def _start(spec: dict[str, Any]) -> None:
    import atexit

    from fragviz.live.agent import Agent, describe
    from fragviz.live.watch import when_imported

    agent = Agent(spec["host"], spec["port"], spec["token"], describe(spec["simulate"], spec["device_memory"]),
                  server_python=spec.get("server_python"), simulate=spec["simulate"])
    atexit.register(agent.stop, spec["linger"])

    def on_torch(_torch: Any) -> None:
        try:
            _serve_torch(agent, spec)
        except Exception as exc:  # never into the job's import of torch
            print(f"fragviz: the live agent cannot watch torch's memory ({type(exc).__name__}: {exc}): it serves "
                  "no device", file=sys.stderr, flush=True)

    when_imported("torch", on_torch)


def _serve_torch(agent: Any, spec: dict[str, Any]) -> None:
    from fragviz.live.agent import install, make_source

    if os.getpid() != agent.pid:
        return  # a fork child of the job imports torch: its agent is the parent's, not its own

    source = make_source(spec["simulate"], True, spec["max_entries"], spec["device_memory"], spec["alloc_conf"],
                         spec["root_file"])
    agent.attach(source)
    install(source)
