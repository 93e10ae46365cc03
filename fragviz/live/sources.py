"""Where the live agent's figures come from: PyTorch's CUDA caching allocator, or fragviz's simulated device.

A source answers four questions, each cheaply and from any thread: the statistics of every device in use,
the snapshot now (PyTorch's own format), the snapshot taken at the last OOM, and the segments now (for
live segment maps). torch is imported lazily; nothing here imports the store or the UI.
"""
from __future__ import annotations

import gc
import threading
import time
from contextlib import ExitStack, contextmanager
from typing import Any, Iterator, Protocol

from fragviz.model.metrics import expandable_page, fragmentation, free_scatter, stuck_in_gap
from fragviz.live.building import dumps_in_parts
from fragviz.live.link import Answer
from fragviz.live.nvml import Nvml


class Source(Protocol):
    simulated: bool

    def device_stats(self) -> list[dict[str, Any]]: ...
    def snapshot(self, trace: bool) -> Answer: ...
    def oom_snapshot(self) -> Answer | None: ...
    @property
    def oom_count(self) -> int: ...
    def state(self) -> list[dict[str, Any]]: ...
    def close(self) -> None: ...


def _let_the_job_run() -> None:
    """Hand the GIL to the job's thread if it waits for it. The job's thread gives the GIL up around every
    torch op and, without this, waits a whole switch interval (5 ms) to get it back from a thread that builds
    a snapshot: sixty ops a step made a step of 6 ms take 300."""
    time.sleep(0)


@contextmanager
def _no_collection() -> Iterator[None]:
    """The cyclic collector off while a snapshot is built: its hundred thousand new dicts would start full
    collections of the job's whole heap, each holding the GIL (the job's thread) for hundreds of milliseconds.
    A snapshot makes no cycles; what the job makes meanwhile is collected after."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _dumps(data: Any) -> bytes:
    """Pickled a frame at a time, the job's thread let run between frames (PyTorch's snapshot of a CUDA device
    is made in the job's process)."""
    return dumps_in_parts(data, _let_the_job_run)


def compact_segment(seg: dict[str, Any]) -> dict[str, Any]:
    """A PyTorch snapshot segment without frames: blocks as [address, size, requested_size, state]."""
    pool_id = seg.get("segment_pool_id")
    return {"device": seg.get("device", 0), "address": seg["address"], "total_size": seg["total_size"],
            "stream": seg.get("stream", 0), "pool": seg.get("segment_type", "large"),
            "pool_id": list(pool_id) if pool_id is not None else None,
            "is_expandable": bool(seg.get("is_expandable", False)),
            "blocks": [[b["address"], b["size"], b.get("requested_size", 0), b["state"]]
                       for b in seg.get("blocks", ())]}


def gap_figures(segments: list[dict[str, Any]]) -> tuple[int, int]:
    """(cached free bytes, largest free block) of PyTorch-format segments."""
    gaps = [b["size"] for seg in segments for b in seg.get("blocks", ()) if b["state"] == "inactive"]
    return sum(gaps), max(gaps, default=0)


def expandable_non_releasable(segments: list[dict[str, Any]]) -> int:
    """Free bytes of PyTorch-format expandable segments that releasing could not unmap (the partial pages at each
    free block's ends): memory_stats()'s inactive_split leaves expandable segments out."""
    out = 0
    for seg in segments:
        if not seg.get("is_expandable"):
            continue
        page, cursor = expandable_page(seg.get("segment_type", "large")), seg["address"]
        for b in seg.get("blocks", ()):
            if b["state"] == "inactive":
                out += stuck_in_gap(cursor, cursor + b["size"], seg["address"], page)
            cursor += b["size"]
    return out


WALK_EVERY = 5.0  # seconds between walks of a CUDA device's segments (the figures memory_stats() lacks)


def ratios(non_releasable: int, reserved: int, free: int, largest: int) -> dict[str, float]:
    return {"fragmentation": fragmentation(non_releasable, reserved), "free_scatter": free_scatter(free, largest)}


class SimulatedSource:
    """The job's CPU tensor storages mirrored into fragviz's allocator model, as on a CUDA device."""

    simulated = True

    def __init__(self, device_memory: int, alloc_conf: str | None, record_history: bool, max_entries: int,
                 root_file: str | None = None) -> None:
        from fragviz.allocator.recorder import SimulatedDevice

        self._oom: tuple[Any, dict[str, Any], int] | None = None  # (the state copied, provenance, its number)
        self._sent = (0, 0)  # frames and stacks sent to the agent's server so far
        self._sent_appended = 0  # trace entries ever added when the last trace was sent (the server has them)
        self.oom_count = 0  # OOM snapshots taken so far
        self.device = SimulatedDevice(device_memory, alloc_conf, root_file, record=record_history,
                                      max_entries=max_entries, on_oom=self._on_oom)
        self._mirroring = ExitStack()
        self._installed_on: int | None = None

    @property
    def capacity(self) -> int:
        return self.device.alloc.capacity

    def install(self) -> None:
        """Start mirroring the calling thread's tensors (the thread that runs the workload) and its
        torch.cuda.empty_cache() calls."""
        from fragviz.allocator.cudasim import cuda_on_cpu

        self._mirroring.enter_context(cuda_on_cpu(self.device))
        self._installed_on = threading.get_ident()

    def _on_oom(self, message: str) -> None:
        # under the device's lock, on the job's thread: only the copy (the server builds the snapshot)
        old, self._oom = self._oom, (self.device.packed_state(True), self._provenance(message), self.oom_count + 1)
        self.oom_count += 1
        if old is not None and old[0].trace is not None:
            old[0].trace.close()

    def _provenance(self, oom_message: str | None = None) -> dict[str, Any]:
        from fragviz.allocator.recorder import simulated_provenance

        out = simulated_provenance(self.device, "fragviz.live")
        if oom_message:
            out["oom_message"] = oom_message
        return out

    def device_stats(self) -> list[dict[str, Any]]:
        with self.device.lock:
            a = self.device.alloc
            free, largest, stuck = a.free_bytes(), a.largest_free_block(), a.non_releasable_bytes()
            stats = {"device": a.device, "allocated_bytes": a.active_bytes - a.pending_bytes(),
                     "reserved_bytes": a.reserved, "active_bytes": a.active_bytes, "requested_bytes": a.requested,
                     "inactive_split_bytes": a.inactive_split_bytes(), "non_releasable_bytes": stuck,
                     "num_alloc_retries": a.num_alloc_retries,
                     "num_ooms": a.num_ooms, "device_total_bytes": a.capacity, "device_free_bytes": a.device_free(),
                     "nvml_used_bytes": None, "largest_free_block": largest,
                     **ratios(stuck, a.reserved, free, largest), "processes": [],
                     "peak_reserved_bytes": a.peaks.reserved, "peak_active_bytes": a.peaks.active,
                     "peak_requested_bytes": a.peaks.requested, "num_device_alloc": a.num_device_alloc,
                     "num_device_free": a.num_device_free, "gpu_uuid": None, "gpu_index": None}
        return [stats]

    def snapshot(self, trace: bool) -> Answer:
        """The state copied under the lock, with only the trace entries added since the last snapshot (the
        agent's server keeps the rest): the server builds the snapshot."""
        state = self.device.packed_state(trace, since=self._sent_appended)
        if trace:
            self._sent_appended = state.appended
        return self._answer(state, self._provenance(), "delta" if trace else "none")

    def _answer(self, state: Any, provenance: dict[str, Any], trace: str, **extra: Any) -> Answer:
        """A packed state, with the frames and stacks interned since the last one sent (the server keeps them).
        `trace`: "delta" (the entries since the last delta), "full" (all of them) or "none"."""
        frames, stacks = self.device.frames_since(self._sent[0], self._sent[1])
        header = {"format": "packed", "device": state.device, "settings": state.settings, "provenance": provenance,
                  "segments": state.segments, "frames_from": self._sent[0], "stacks_from": self._sent[1],
                  "frames": [[f.filename, f.line, f.name] for f in frames], "stacks": stacks, "trace": trace,
                  "trace_length": state.length, **extra}
        self._sent = (self._sent[0] + len(frames), self._sent[1] + len(stacks))
        return Answer(header, state.trace if state.trace is not None else b"", keep=bool(extra))

    @property
    def lock_seconds(self) -> float:
        """How long the last snapshot held the lock the job's allocations wait on."""
        return self.device.lock_seconds

    def oom_snapshot(self) -> Answer | None:
        if self._oom is None:
            return None
        state, provenance, count = self._oom
        return self._answer(state, provenance, "full", count=count)

    def state(self) -> list[dict[str, Any]]:
        from fragviz.allocator.state import allocator_segments

        with self.device.lock:
            segments = allocator_segments(self.device.alloc)
        return [compact_segment(s) for s in segments]

    def forked(self) -> None:
        """In a fork child of the job: nothing more is mirrored, and the device's lock is a new one."""
        self.device.lock = threading.RLock()
        self.device.closed = True

    def close(self) -> None:
        self.device.closed = True
        if self._installed_on == threading.get_ident():  # dispatch modes belong to the thread that entered them
            self._mirroring.close()
            self._installed_on = None


class CudaSource:
    """PyTorch's CUDA caching allocator (memory_stats, memory_snapshot, the OOM observer) and NVML."""

    simulated = False

    def __init__(self, record_history: bool, max_entries: int) -> None:
        import torch

        self.torch = torch
        self.nvml = Nvml()
        self.record_history = record_history
        self._oom: bytes | None = None
        self.oom_count = 0  # OOM snapshots taken so far
        self._walk: tuple[float, dict[int, tuple[int, int, int]]] | None = None
        self.walk_seconds = 0.0  # how long the last walk of the segments took
        if record_history:
            torch.cuda.memory._record_memory_history(max_entries=max_entries)
        torch._C._cuda_attach_out_of_memory_observer(self._on_oom)

    def _on_oom(self, device: int, alloc: int, device_total: int, device_free: int) -> None:
        # PyTorch calls observers after releasing the allocator's lock, so taking a snapshot here is safe.
        self._oom = _dumps(self.torch.cuda.memory._snapshot())
        self.oom_count += 1

    def _devices(self) -> list[int]:
        """Devices the job uses. Asking about others would create CUDA contexts on them, costing memory."""
        cuda = self.torch.cuda
        if not cuda.is_initialized():
            return []
        current = cuda.current_device()
        return [d for d in range(cuda.device_count())
                if d == current or cuda.memory_stats(d).get("reserved_bytes.all.current", 0) > 0]

    def device_stats(self) -> list[dict[str, Any]]:
        """Every poll reads memory_stats() (and NVML or mem_get_info()) only; the figures that need the segments
        (the largest free block, the expandable segments' non-releasable pages) come from a walk of the state
        without its traces, at most every WALK_EVERY seconds."""
        devices = self._devices()
        if not devices:
            return []
        walked = self._walked()
        return [self._stats(d, walked.get(d, (0, 0, 0))) for d in devices]

    def _walked(self) -> dict[int, tuple[int, int, int]]:
        """Per device (cached free bytes, largest free block, expandable non-releasable bytes) of the last walk,
        walked again when it is older than WALK_EVERY seconds; how long a walk took is `walk_seconds`."""
        now = time.monotonic()
        if self._walk is None or now - self._walk[0] >= WALK_EVERY:
            segments = self.segments()
            figures = {}
            for d in {seg.get("device", 0) for seg in segments}:
                mine = [seg for seg in segments if seg.get("device", 0) == d]
                figures[d] = (*gap_figures(mine), expandable_non_releasable(mine))
            self.walk_seconds = time.monotonic() - now
            self._walk = (now, figures)
        return self._walk[1]

    def segments(self) -> list[dict[str, Any]]:
        """The segments now, without the trace (torch 2.13's memory_snapshot() builds the whole trace otherwise:
        up to 100,000 entries with their stacks, each time)."""
        try:
            return self.torch.cuda.memory_snapshot(include_traces=False)
        except TypeError:  # a torch from before include_traces
            return self.torch.cuda.memory_snapshot()

    def _stats(self, device: int, walked: tuple[int, int, int]) -> dict[str, Any]:
        s = self.torch.cuda.memory_stats(device)
        free, largest, expandable_stuck = walked
        reserved = s.get("reserved_bytes.all.current", 0)
        stuck = s.get("inactive_split_bytes.all.current", 0) + expandable_stuck
        uuid = self._uuid(device)
        nv = self.nvml.memory(device, uuid)
        total, dev_free = (nv["total"], nv["free"]) if nv else self.torch.cuda.mem_get_info(device)[::-1]
        return {"device": device, "allocated_bytes": s.get("allocated_bytes.all.current", 0),
                "reserved_bytes": reserved,
                "active_bytes": s.get("active_bytes.all.current", 0),
                "requested_bytes": s.get("requested_bytes.all.current", 0),
                "inactive_split_bytes": s.get("inactive_split_bytes.all.current", 0), "non_releasable_bytes": stuck,
                "num_alloc_retries": s.get("num_alloc_retries", 0), "num_ooms": s.get("num_ooms", 0),
                "device_total_bytes": int(total), "device_free_bytes": int(dev_free),
                "nvml_used_bytes": nv["used"] if nv else None, "largest_free_block": largest,
                **ratios(stuck, reserved, free, largest), "processes": nv["processes"] if nv else [],
                "peak_reserved_bytes": s.get("reserved_bytes.all.peak", 0),
                "peak_active_bytes": s.get("active_bytes.all.peak", 0),
                "peak_requested_bytes": s.get("requested_bytes.all.peak", 0),
                "num_device_alloc": s.get("num_device_alloc", 0), "num_device_free": s.get("num_device_free", 0),
                "gpu_uuid": uuid, "gpu_index": nv["index"] if nv else None}

    def _uuid(self, device: int) -> str | None:
        uuid = getattr(self.torch.cuda.get_device_properties(device), "uuid", None)
        return None if uuid is None else (str(uuid) if str(uuid).startswith("GPU-") else f"GPU-{uuid}")

    def snapshot(self, trace: bool) -> Answer:
        """PyTorch builds the snapshot's objects itself, in the job's process; they are pickled here a frame
        at a time (the job's thread runs between frames) and the server only passes the bytes on."""
        with _no_collection():
            data = self.torch.cuda.memory._snapshot()
            if not trace:
                data["device_traces"] = [[] for _ in data.get("device_traces", ())]
            return Answer({"format": "pickle"}, _dumps(data))

    def oom_snapshot(self) -> Answer | None:
        if self._oom is None:
            return None
        return Answer({"format": "pickle", "count": self.oom_count}, self._oom, keep=True)

    def state(self) -> list[dict[str, Any]]:
        if not self.torch.cuda.is_initialized():
            return []
        return [compact_segment(s) for s in self.segments()]

    def close(self) -> None:
        if self.record_history:
            self.torch.cuda.memory._record_memory_history(enabled=None)
