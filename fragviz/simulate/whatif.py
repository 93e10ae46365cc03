"""What-ifs: the recorded workload free-run under other settings or on another device size."""
from __future__ import annotations

from typing import Any

from fragviz.allocator.config import AllocatorSettings, parse_alloc_conf
from fragviz.allocator.state import snapshot_dict
from fragviz.analysis import Analysis
from fragviz.model import OOM
from fragviz.simulate.freerun import FreeRunResult, free_run


def recorded_capacity(analysis: Analysis, device: int) -> int | None:
    """What PyTorch could reserve on the device, as far as the trace tells: reserved + free at its first OOM."""
    replay = analysis.replays[device]
    hits = (replay.trace.action == OOM).nonzero()[0]
    if not len(hits):
        return None
    k = int(hits[0])
    return int(replay.series["reserved"][k]) + int(replay.trace.addr[k])


def run_free(analysis: Analysis, device: int, settings: AllocatorSettings, capacity: int | None,
             record: bool = False, progress=None) -> FreeRunResult:
    replay = analysis.replays[device]
    return free_run(replay.trace, replay.segments_at(0), settings, capacity, replay.series["reserved"].tolist(),
                    record=record, progress=progress)


def what_if(analysis: Analysis, conf: str, device_memory: int | None = None) -> dict[str, Any]:
    """Free-run every device under `conf` and under the recorded settings: the `--alloc-conf` JSON object."""
    settings = parse_alloc_conf(conf)
    devices = []
    for device in analysis.replays:
        capacity = device_memory if device_memory is not None else recorded_capacity(analysis, device)
        given = run_free(analysis, device, settings, capacity).summary()
        recorded = run_free(analysis, device, analysis.settings, capacity).summary()
        devices.append({"device": device, "mode": "free-run", **given, "recorded": recorded})
    return {"devices": devices}


def simulated_snapshot(analysis: Analysis, conf: str, device_memory: int | None = None) -> dict[str, Any]:
    """The free-run under `conf` as a snapshot in PyTorch's format, marked as simulated."""
    settings = parse_alloc_conf(conf)
    allocators = []
    for device in analysis.replays:
        capacity = device_memory if device_memory is not None else recorded_capacity(analysis, device)
        allocators.append(run_free(analysis, device, settings, capacity, record=True).allocator)
    snap = analysis.snapshot
    provenance = {"origin": "simulated", "source": snap.source, "alloc_conf": conf, "device_memory_bytes": device_memory,
                  "mode": "free-run"}
    return snapshot_dict(allocators, snap.frames, snap.stacks, provenance)
