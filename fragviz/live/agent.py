"""The live agent: inside a training job, it serves the job's allocator figures through a server process.

    agent = fragviz.live.start_agent(port=9400)    # first thing in train.py, or `fragviz run -- python train.py`
    ...
    agent.stop()

The job's process does as little as it can. A server process of its own (server.py) listens on the port,
takes every connection, reads and checks every request (the door, the Host header, the token) and builds and
pickles every snapshot, at a lower priority than the job. Over a socket pair it asks the job only what passed
its door; one thread of the job answers (`_answer`), blocked in a read, without the GIL, between asks: the
stats, the segments, and for a snapshot a copy of the state taken under the allocator's lock (a simulated
device's, packed: fragviz.allocator.packed). Neither the port nor the link survives into a fork child of the
job, and the server ends with the job, however it ends.

A port the job cannot have is no reason for the job not to run: the server takes the next free one and says
so (server.listen). Standard library, lazy torch and fragviz's core only (see sources.py).
"""
from __future__ import annotations

import atexit
import json
import os
import socket
import subprocess
import sys
import threading
import time
import weakref
from typing import Any, Callable

from fragviz.base.errors import AgentError
from fragviz.live import link
from fragviz.live.link import Answer

DEFAULT_DEVICE_MEMORY = 16 * 1024**3
LISTEN_WAIT = 10.0  # seconds start_agent (and a job's end) waits for its server to say where it listens
_AGENTS: "weakref.WeakSet[Agent]" = weakref.WeakSet()


class Agent:
    """A running agent: `.port` and `.url` (None when it serves nothing), `.stats()`, `.stop()`; `.source` is
    None until the job has imported torch (under `fragviz run`, the agent waits for that)."""

    def __init__(self, host: str, port: int, token: str | None, what: str, server_python: str | None = None,
                 simulate: bool | None = None) -> None:
        self.source: Any = None
        self.host = host
        self.token = token
        self.requested_port = port
        self.port: int | None = None
        self.url: str | None = None
        self.note: str | None = None  # why it serves elsewhere than asked, or not at all
        self.simulate = simulate
        self.ranks = rank_env()
        self.process_start_time = process_start_time()
        self.pid = os.getpid()
        self.polls = 0
        self.cpu_seconds = 0.0
        self.oom_fetched = 0  # how many OOM snapshots the source had taken when one was last served
        self.listening = threading.Event()  # set once the server said where it listens (or that it cannot)
        self._stopped = False
        self._sock, theirs = socket.socketpair()
        try:
            self._server = subprocess.Popen([*server_command(server_python or sys.executable), str(theirs.fileno())],
                                            pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
                                            stdout=subprocess.DEVNULL)
        except OSError as exc:
            self._sock.close()
            raise AgentError(f"the live agent's server process cannot start ({exc.strerror or exc})") from None
        finally:
            theirs.close()
        link.send(self._sock, server_config(host, port, token, who(self.ranks), what))
        _AGENTS.add(self)
        self._thread = threading.Thread(target=self._answer, name="fragviz-agent", daemon=True)
        self._thread.start()

    def attach(self, source: Any) -> None:
        """Serve this source's figures from now on (the job imported torch)."""
        self.source = source

    def stats(self) -> dict[str, Any]:
        """The `/v1/stats` object (the server adds its own figures to `agent`)."""
        source = self.source
        devices = source.device_stats() if source is not None else []
        self.polls += 1
        agent = {"polls": self.polls, "cpu_seconds": round(self.cpu_seconds, 6),
                 "snapshot_lock_seconds": round(getattr(source, "lock_seconds", 0.0), 6),
                 "state_walk_seconds": round(getattr(source, "walk_seconds", 0.0), 6),
                 "torch_imported": source is not None}
        simulated = source.simulated if source is not None else self.simulate
        return {"time": time.time(), "pid": os.getpid(), "process_start_time": self.process_start_time,
                "simulated": simulated, **self.ranks, "devices": devices, "agent": agent}

    # -- the job's side of the link ----------------------------------------------------------------------
    def _answer(self) -> None:
        """Answer the server's asks until it or the job ends (this thread waits in a read between asks)."""
        try:
            for header, _payload in link.messages(self._sock):
                self._take(header)
        except (OSError, ValueError):
            pass
        finally:
            self.listening.set()

    def _take(self, header: dict[str, Any]) -> None:
        op = header.get("op")
        if op == "listening":
            self.port, self.note = header.get("port"), header.get("note")
            self.url = header.get("url")
            self.listening.set()
            return
        if op == "oom_fetched":
            self.oom_fetched = max(self.oom_fetched, int(header.get("count", 0)))
            return
        started = time.thread_time()
        try:
            answer = self._reply(str(op), header)
        except Exception as exc:  # never into the job: the server answers 500 with it
            answer = Answer({"error": f"{type(exc).__name__}: {exc}"[:300]})
        try:
            link.send(self._sock, {"id": header.get("id"), **answer.header}, answer.payload)
        finally:
            answer.release()
            self.cpu_seconds += time.thread_time() - started

    def _reply(self, op: str, header: dict[str, Any]) -> Any:
        """The answer to one ask."""
        source = self.source
        if op == "stats":
            return Answer({}, json.dumps(self.stats()).encode())
        if op == "state":
            segments = source.state() if source is not None else []
            return Answer({}, json.dumps({"time": time.time(), "pid": os.getpid(), "segments": segments}).encode())
        if op in ("snapshot", "oom"):
            if source is None:
                return Answer({"none": True, "reason": "the job has not imported torch yet"})
            answer = source.snapshot(bool(header.get("trace", True))) if op == "snapshot" else source.oom_snapshot()
            return answer if answer is not None else Answer({"none": True})
        raise ValueError(f"no such ask: {op[:40]}")

    # -- the end ---------------------------------------------------------------------------------------------
    def stop(self, linger: float = 0.0) -> None:
        """Stop serving. With `linger`, first wait up to that many seconds for an OOM snapshot nobody has
        fetched yet to be fetched (a poller comes for it within its interval), so a dying job's failure
        state is not lost. The server has closed the port when this returns."""
        if self._stopped or os.getpid() != self.pid:  # a fork child has nothing to stop
            return
        deadline = time.monotonic() + linger
        while (self.source is not None and self.oom_fetched < self.source.oom_count and self.port is not None
               and self._thread.is_alive() and time.monotonic() < deadline):
            time.sleep(0.05)
        self._stopped = True
        atexit.unregister(self.stop)
        self.listening.wait(LISTEN_WAIT)  # a job shorter than the server's start still has its line said
        _close(self._sock)
        try:
            self._server.wait(5.0)
        except subprocess.TimeoutExpired:
            self._server.kill()
            self._server.wait()
        self._thread.join(5.0)
        if self.source is not None:
            self.source.close()

    def _forked(self) -> None:
        """In a fork child: the link is the parent's (the server ends with the parent, not with this child), and
        the source is left alone (a simulated device stops mirroring, its lock new: the parent's answering
        thread, which does not exist here, may have held it at the fork)."""
        self._stopped = True
        try:
            self._sock.close()
        except OSError:
            pass
        forked = getattr(self.source, "forked", None)
        if forked is not None:
            forked()


def server_command(python: str) -> list[str]:
    """The command line that runs the server process (server.main) with `python`, fragviz found where this
    file is; isolated (-I), so nothing of the job's environment reaches it."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    code = (f"import os, sys\nsys.path.insert(0, {root!r})\ntry:\n    from fragviz.live.server import main\n"
            "except Exception as exc:\n    os.write(2, f'fragviz: the live agent cannot start its server in "
            "{sys.executable} ({type(exc).__name__}: {exc}): the job runs without it\\n'.encode())\n"
            "else:\n    main()")
    return [python, "-I", "-c", code]


def server_config(host: str, port: int, token: str | None, who: str, what: str) -> dict[str, Any]:
    """The settings the job sends its server first (the token goes this way, never on a command line)."""
    local_world = os.environ.get("LOCAL_WORLD_SIZE", "")
    return {"host": host, "port": port, "token": token, "pid": os.getpid(), "who": who, "what": what,
            "step": int(local_world) if local_world.isdigit() and int(local_world) > 0 else 1}


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)  # the answering thread's read returns at once
    except OSError:
        pass
    sock.close()


def _forget_in_child() -> None:
    for agent in list(_AGENTS):
        agent._forked()
    _AGENTS.clear()


os.register_at_fork(after_in_child=_forget_in_child)


def who(ranks: dict[str, int | None]) -> str:
    """'rank R (local rank L), ' under torchrun, else ''."""
    return f"rank {ranks['rank']} (local rank {ranks['local_rank']}), " if ranks["rank"] is not None else ""


def process_start_time() -> float:
    """When this process started, in Unix time (Linux: /proc; elsewhere, when the agent started)."""
    try:
        with open("/proc/self/stat") as fh:
            ticks = int(fh.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime: clock ticks after boot
        with open("/proc/stat") as fh:
            boot = int(next(line for line in fh if line.startswith("btime")).split()[1])
        return round(boot + ticks / os.sysconf("SC_CLK_TCK"), 2)
    except (OSError, ValueError, IndexError, StopIteration):
        return round(time.time(), 2)


def rank_env() -> dict[str, int | None]:
    """RANK, LOCAL_RANK and WORLD_SIZE as torchrun sets them (None outside a distributed launch)."""
    def read(name: str) -> int | None:
        value = os.environ.get(name, "")
        return int(value) if value.isdigit() else None

    return {"rank": read("RANK"), "local_rank": read("LOCAL_RANK"), "world_size": read("WORLD_SIZE")}


def describe(simulate: bool | None, device_memory: int | None) -> str:
    """What the agent serves, for its one line."""
    from fragviz.base.units import format_bytes

    device = f"a simulated CUDA device of {format_bytes(device_memory or DEFAULT_DEVICE_MEMORY)}"
    if simulate:
        return f"{device} (CPU tensors mirrored into fragviz's allocator model)"
    if simulate is False:
        return "the CUDA caching allocator"
    return f"the CUDA caching allocator, or without CUDA {device}"


def start_agent(port: int = 0, host: str = "127.0.0.1", token: str | None = None, record_history: bool = True,
                max_entries: int = 100_000, *, simulate: bool | None = None, device_memory: int | None = None,
                alloc_conf: str | None = None, root_file: str | None = None, linger: float = 10.0) -> Agent:
    """Start serving this process's allocator on `host:port` (port 0: any free port; see `.port`).

    Without CUDA (or with `simulate=True`) the tensors this thread creates on the CPU from now on are
    mirrored into fragviz's allocator model as on a CUDA device of `device_memory` bytes (16 GiB by
    default), which raises PyTorch's OOM error where that device would run out. Binding to anything but
    loopback needs a `token`. A port already taken is no error: the agent serves on the next free one
    (`.port`, and one line on stderr). At exit the agent waits up to `linger` seconds for an unfetched OOM
    snapshot.
    """
    from fragviz.live.protocol import check_host

    token = token or None  # an empty token protects nothing: treated as none
    check_host(host, token)
    source = make_source(simulate, record_history, max_entries, device_memory, alloc_conf, root_file)
    try:
        agent = Agent(host, port, token, describe(source.simulated, device_memory), simulate=source.simulated)
    except BaseException:
        source.close()
        raise
    agent.attach(source)
    install(source)
    atexit.register(agent.stop, linger)
    agent.listening.wait(LISTEN_WAIT)
    return agent


def make_source(simulate: bool | None, record_history: bool, max_entries: int, device_memory: int | None,
                alloc_conf: str | None, root_file: str | None) -> Any:
    """The job's allocator (CUDA), or the simulated device where there is no CUDA or `simulate` says so."""
    import torch

    from fragviz.live.sources import CudaSource, SimulatedSource

    if simulate is None:
        simulate = not torch.cuda.is_available()
    if simulate:
        return SimulatedSource(device_memory or DEFAULT_DEVICE_MEMORY, alloc_conf, record_history, max_entries,
                               root_file)
    return CudaSource(record_history, max_entries)


def install(source: Any) -> None:
    """A simulated device starts mirroring the calling thread's tensors (the thread that runs the workload)."""
    installer: Callable[[], None] | None = getattr(source, "install", None)
    if installer is not None:
        installer()
