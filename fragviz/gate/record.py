"""Recording a block of code's allocations for a gate: on CUDA through PyTorch's memory history, on a CPU through
fragviz's simulated device (`fragviz.allocator.recorder`), and the recording summarised.

On a CPU the record is deterministic: the same code gives the same figures on every run. Every tensor storage an
operator creates on the recording thread is placed by the allocator model on a device with no size limit (a
device size is checked afterwards, by simulating the trace on it), and the cyclic garbage collector is paused
while the block runs, so that when it frees a cycle does not depend on what ran before.

torch is imported lazily: the rest of fragviz runs without it.
"""
from __future__ import annotations

import gc
import pickle
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Iterator

from fragviz.gate.figures import MemorySummary, summarize
from fragviz.replay.analysis import Analysis

# the simulated device's size while recording: 1 TiB, more than a CPU run holds, so never the limit; not more, so
# that expandable segments' reservations (1.125 x the device each) fit in the simulator's address space
UNLIMITED = 1 << 40
AUTO, CUDA, SIMULATED = "auto", "cuda", "simulated"


@dataclass
class Recording:
    """What a recorded block leaves: the snapshot (PyTorch's format) once the block is done."""

    device: str  # CUDA or SIMULATED
    snapshot: dict[str, Any] | None = None

    def analysis(self, source: str) -> Analysis:
        """The recording replayed, as a snapshot file of it would be (through the safe loader)."""
        from fragviz.replay.analysis import analyze
        from fragviz.snapshot.loader import decode_bytes
        from fragviz.snapshot.parse import parse_snapshot

        if self.snapshot is None:
            raise RuntimeError("the recording is not finished")
        return analyze(parse_snapshot(decode_bytes(self.pickled, source)))

    @cached_property
    def pickled(self) -> bytes:
        """The snapshot as a file holds it, pickled once for the replay and the file both."""
        return pickle.dumps(self.snapshot, protocol=4)


def choose_device(wanted: str) -> str:
    """AUTO is CUDA where torch sees a CUDA device, else SIMULATED; CUDA where torch sees none is refused."""
    if wanted == SIMULATED:
        return wanted
    import torch

    if torch.cuda.is_available():
        return CUDA
    if wanted == CUDA:
        from fragviz.base.errors import UsageError

        built = "built without CUDA" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
        raise UsageError(f"memory device cuda: torch {torch.__version__} ({built}) sees no CUDA device; record on "
                         "fragviz's simulated device instead (memory_device = simulated, or auto)")
    return SIMULATED


@contextmanager
def recording(device: str = AUTO, alloc_conf: str | None = None, root_file: str | None = None,
              max_entries: int = 1_000_000) -> Iterator[Recording]:
    """Record the allocations of the code in the block; the Recording's snapshot is set when the block ends (also
    when it raises)."""
    chosen = choose_device(device)
    rec = Recording(chosen)
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        if chosen == CUDA:
            with _cuda(rec, max_entries):
                yield rec
        else:
            with _simulated(rec, alloc_conf, root_file):
                yield rec
    finally:
        if was_enabled:
            gc.enable()


@contextmanager
def _simulated(rec: Recording, alloc_conf: str | None, root_file: str | None) -> Iterator[None]:
    from fragviz.allocator.cudasim import cuda_on_cpu
    from fragviz.allocator.recorder import SimulatedDevice, simulated_provenance

    device = SimulatedDevice(UNLIMITED, alloc_conf or "", root_file)
    try:
        with cuda_on_cpu(device):
            yield
    finally:
        provenance = simulated_provenance(device, "fragviz.gate")
        provenance["device_memory_bytes"] = None  # no limit while recording
        rec.snapshot = device.snapshot(provenance)


@contextmanager
def _cuda(rec: Recording, max_entries: int) -> Iterator[None]:
    import torch

    import inspect

    torch.cuda.synchronize()
    torch.cuda.empty_cache()  # what earlier code left cached is not this block's
    options = {"max_entries": max_entries, "stacks": "python"}
    if "clear_history" in inspect.signature(torch.cuda.memory._record_memory_history).parameters:
        options["clear_history"] = True  # PyTorch 2.4+: the trace holds this block's events only
    torch.cuda.memory._record_memory_history(**options)
    try:
        yield
    finally:
        torch.cuda.synchronize()
        rec.snapshot = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)


def summary_of(rec: Recording, source: str, strip_prefix: str | None = None) -> tuple[MemorySummary, Analysis]:
    """The recording's memory summary (site paths made relative to `strip_prefix`, so a baseline written in one
    checkout compares in another) and its analysis."""
    analysis = rec.analysis(source)
    summary = summarize(analysis, source)
    if strip_prefix:
        summary = relative_to(summary, strip_prefix)
    return summary, analysis


def relative_to(summary: MemorySummary, prefix: str) -> MemorySummary:
    from dataclasses import replace

    prefix = prefix.rstrip("/") + "/"

    def cut(text: str | None) -> str | None:
        return None if text is None else text.replace(prefix, "")

    devices = tuple(replace(d, sites=tuple(replace(s, site=cut(s.site), frame=cut(s.frame)) for s in d.sites))
                    for d in summary.devices)
    return replace(summary, devices=devices)
