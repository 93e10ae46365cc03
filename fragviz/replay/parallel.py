"""A snapshot's devices replayed side by side: each device in a forked worker, when the file has several.

Devices are independent (each has its own trace and segments), so a file with several replays in about the
time of its longest device. Workers are forked, so they share the parsed snapshot without copying it; they
return only what the replay computed (series, block sizes, checkpoints, warnings). Forking is safe only in a
process with one thread (a command, an ingest child), so a threaded server replays one device at a time.
"""
from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from contextlib import suppress
from typing import Any, Callable

from fragviz.allocator.config import AllocatorSettings
from fragviz.model import Snapshot
from fragviz.replay import DeviceReplay, replay_device
from fragviz.replay.layout import default_sizer

Progress = Callable[[int, int], None]  # (events done, events in all)
_SHARED: tuple[Snapshot, AllocatorSettings] | None = None  # what forked workers inherit
_PR_SET_PDEATHSIG = 1


def replay_devices(snapshot: Snapshot, settings: AllocatorSettings, progress: Progress | None = None,
                   workers: int = 1) -> dict[int, DeviceReplay]:
    """Every device of `snapshot` replayed, in up to `workers` processes at once."""
    devices = snapshot.devices()
    total = sum(len(snapshot.trace_of(d)) for d in devices) or 1
    workers = min(workers, len(devices), os.cpu_count() or 1)
    if workers > 1 and _can_fork():
        return _in_workers(snapshot, settings, devices, total, progress, workers)
    replays, done = {}, 0
    for device in devices:
        tick = None
        if progress is not None:
            tick = (lambda base: lambda event: progress(base + event, total))(done)
        replays[device] = replay_device(snapshot, device, settings, progress=tick)
        done += len(snapshot.trace_of(device))
    return replays


def _can_fork() -> bool:
    return ("fork" in multiprocessing.get_all_start_methods() and threading.active_count() == 1
            and not multiprocessing.current_process().daemon)  # a daemonic process may not have children


def _in_workers(snapshot: Snapshot, settings: AllocatorSettings, devices: list[int], total: int,
                progress: Progress | None, workers: int) -> dict[int, DeviceReplay]:
    """The devices replayed in forked workers, longest trace first. A worker that dies (killed, out of memory)
    breaks the pool: the devices it left are replayed here, one at a time, rather than waited for forever."""
    global _SHARED
    longest_first = sorted(devices, key=lambda d: -len(snapshot.trace_of(d)))
    replays: dict[int, DeviceReplay] = {}

    def keep(replay: DeviceReplay) -> None:
        replays[replay.device] = replay
        if progress is not None:
            progress(sum(len(snapshot.trace_of(d)) for d in replays), total)

    _SHARED = (snapshot, settings)
    try:
        context = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(workers, mp_context=context, initializer=_end_with_parent,
                                 initargs=(os.getpid(),)) as pool:
            pending = [pool.submit(_replay_in_worker, d) for d in longest_first]
            for finished in as_completed(pending):
                device, parts = finished.result()
                keep(DeviceReplay(device, snapshot.trace_of(device), sizer=default_sizer(settings), **parts))
    except BrokenProcessPool:
        for device in longest_first:
            if device not in replays:
                keep(replay_device(snapshot, device, settings))
    finally:
        _SHARED = None
    return {d: replays[d] for d in devices}


def _end_with_parent(parent: int) -> None:
    """In a worker: ask the kernel (Linux) for SIGKILL when the process that forked it ends, so that a killed
    ingest leaves no worker behind holding its output pipes open."""
    if sys.platform.startswith("linux"):
        with suppress(OSError, AttributeError):
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # it ended before the request took effect
        os._exit(1)


def _replay_in_worker(device: int) -> tuple[int, dict[str, Any]]:
    assert _SHARED is not None, "a replay worker runs only in a process forked by replay_devices"
    snapshot, settings = _SHARED
    r = replay_device(snapshot, device, settings)
    return device, {"series": dict(r.series), "block_size": r.block_size, "checkpoints": dict(r.checkpoints),
                    "warnings": r.warnings, "pre_trace_blocks": r.pre_trace_blocks,
                    "pre_trace_segments": r.pre_trace_segments}
