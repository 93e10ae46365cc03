"""The OOM doctor: for each "CUDA out of memory", a verdict with its numbers, what to do, and where a
trace exists, what the suggested settings would have changed (by free-run simulation).

Verdicts:
  exhaustion       live tensors (or the request itself) need more than the device holds
  fragmentation    enough memory is cached but unallocated (with what the device has free), yet no free
                   block is large enough
  outside_pytorch  a large share of the device is used outside PyTorch's allocator
  capacity_cap     the device had the memory, but a cap (memory fraction, MIG/MPS, the driver) refused it
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fragviz.allocator.config import parse_alloc_conf
from fragviz.analysis import Analysis
from fragviz.metrics import state_figures
from fragviz.model import OOM
from fragviz.doctor.message import OomMessage, find_messages, parse_message
from fragviz.doctor.pools import oom_notes
from fragviz.simulate.whatif import recorded_capacity, run_free
from fragviz.units import format_bytes as fb

WHAT_IF_CONFS = ("expandable_segments:True", "max_split_size_mb:512")
# The keys of one OOM in `fragviz doctor --json`; library callers also get "device" and "event".
PUBLIC_KEYS = ("verdict", "requested_bytes", "reserved_bytes", "allocated_bytes", "device_total_bytes",
               "device_free_bytes", "largest_free_block", "advice", "what_if")


@dataclass
class OomFacts:
    requested: int | None
    reserved: int | None = None
    allocated: int | None = None
    total: int | None = None
    free: int | None = None
    largest_free_block: int | None = None
    allowed: int | None = None
    other_processes: list[int] = field(default_factory=list)
    era: str = "2.1+"
    device: int | None = None
    event: int | None = None

    @property
    def cached_free(self) -> int | None:
        if self.reserved is None or self.allocated is None:
            return None
        return max(0, self.reserved - self.allocated)

    @property
    def outside(self) -> int | None:
        if self.total is None or self.free is None or self.reserved is None:
            return None
        return max(0, self.total - self.free - self.reserved)


def verdict_of(f: OomFacts) -> str:
    """The cause, in this order: an impossible request, a cap, memory held outside PyTorch, fragmentation,
    exhaustion. `slack` keeps a device "free" figure a little above the request (page granularity, the
    driver's own needs) from counting as room."""
    q, free, cached, outside = f.requested, f.free, f.cached_free, f.outside
    if q is None:
        return "outside_pytorch" if f.era == "driver" else "exhaustion"
    slack = max(64 * 1024 * 1024, q // 10)
    if f.total is not None and q > f.total:
        return "exhaustion"
    if f.allowed is not None and f.reserved is not None and f.reserved + q > f.allowed:
        return "capacity_cap"
    if free is not None and free >= q + slack:
        return "capacity_cap"
    if (outside is not None and outside >= 0.1 * f.total and outside > (cached or 0)
            and outside + (free or 0) + (cached or 0) >= q):
        return "outside_pytorch"
    if cached is not None and (cached >= q or (free is not None and cached >= slack and cached + free >= q)):
        return "fragmentation"
    return "exhaustion"


def _advice(verdict: str, f: OomFacts, what_ifs: list[dict[str, Any]]) -> list[str]:
    helps = {w["alloc_conf"]: w["avoids_oom"] for w in what_ifs if w["alloc_conf"] != "recorded settings"}
    out = {"exhaustion": _exhaustion, "fragmentation": _fragmentation, "outside_pytorch": _outside,
           "capacity_cap": _cap}[verdict](f, helps)
    if any(w["alloc_conf"] == "recorded settings" and w["avoids_oom"] for w in what_ifs):
        out.append("Note: simulated under the recorded settings this workload does not run out of memory, so the "
                   "what-if figures are indicative only (the device size is estimated from the OOM itself).")
    return out


def _exhaustion(f: OomFacts, helps: dict[str, bool]) -> list[str]:
    if f.requested is None:
        return ["This message carries no figures (PyTorch before 1.0): fragviz cannot tell exhaustion from "
                "fragmentation. Record a snapshot with a current PyTorch to know more.",
                "Reduce the batch size, or use activation checkpointing or mixed precision."]
    out = []
    if f.total is not None and f.requested > f.total:
        out.append(f"The request alone ({fb(f.requested)}) is larger than the whole device ({fb(f.total)}): no "
                   "setting can place it. Split the computation (chunk the batch, the sequence or the attention).")
    elif f.allocated is not None:
        out.append(f"Live tensors hold {fb(f.allocated)}"
                   + (f" of {fb(f.reserved)} reserved" if f.reserved is not None else "")
                   + f", and {fb(f.requested)} more was needed: the job needs more memory than the device gives it.")
    out.append("Reduce the batch size or sequence length, use activation checkpointing (torch.utils.checkpoint), "
               "mixed precision (bf16), or shard parameters and optimizer state (FSDP, ZeRO).")
    for conf, ok in helps.items():
        if not ok:
            out.append(f"{conf} would not help: simulated on this trace, the run still runs out of memory.")
    return out


def _fragmentation(f: OomFacts, helps: dict[str, bool]) -> list[str]:
    largest = f" (the largest free block is {fb(f.largest_free_block)})" if f.largest_free_block is not None else ""
    out = [f"{fb(f.cached_free)} is reserved by PyTorch but unallocated"
           + (f" and the device has {fb(f.free)} free" if f.free else "")
           + f", enough for the {fb(f.requested)} requested, yet no free block is large enough{largest}: "
           "the cached memory is fragmented."]
    if helps.get("expandable_segments:True", True):
        out.append("Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: one growing segment per stream replaces "
                   "separate cudaMallocs, so freed memory merges instead of staying in slivers.")
    else:
        out.append("expandable_segments:True would not help here: simulated on this trace, it still runs out.")
    if helps.get("max_split_size_mb:512", True):
        out.append("Or set max_split_size_mb (for example 512) so that small requests do not split large cached blocks.")
    out.append("Keep tensor sizes steady (pad variable sequence lengths to a few buckets) so freed blocks fit the "
               "next requests. torch.cuda.empty_cache() does not help: the allocator already released every whole "
               "free segment before it gave up.")
    return out


def _outside(f: OomFacts, helps: dict[str, bool]) -> list[str]:
    if f.requested is None:
        return ["The failure came from a CUDA call outside the caching allocator (a kernel launch, a library "
                "handle or its workspace, NCCL), not from a tensor allocation.",
                "Check what else uses the GPU (nvidia-smi), and leave headroom: reserve less for tensors "
                "(torch.cuda.set_per_process_memory_fraction) or shrink the batch."]
    out = [f"{fb(f.outside)} of the {fb(f.total)} device is used outside PyTorch's allocator (CUDA context, NCCL "
           "buffers, cuBLAS/cuDNN workspaces, other processes), more than the request needed."]
    if f.other_processes:
        listed = ", ".join(fb(p) for p in f.other_processes)
        out.append(f"Other processes on GPU {f.device if f.device is not None else ''} hold {listed}: stop them or "
                   "move them to another GPU (nvidia-smi lists them).")
    out.append("For NCCL lower NCCL_BUFFSIZE or NCCL_MAX_NCHANNELS; for cuBLAS set CUBLAS_WORKSPACE_CONFIG=:4096:8.")
    return out


def _cap(f: OomFacts, helps: dict[str, bool]) -> list[str]:
    if f.allowed is not None:
        return [f"A per-process memory fraction caps PyTorch at {fb(f.allowed)}, and {fb(f.reserved)} reserved "
                f"plus {fb(f.requested)} requested exceeds it. Raise or remove "
                "torch.cuda.set_per_process_memory_fraction."]
    return [f"The device reported {fb(f.free)} free, more than the {fb(f.requested)} requested, yet the allocation "
            "failed: a limit outside PyTorch's figures applied (a memory fraction, MIG or MPS limits, or the "
            "driver's own accounting, as under Windows WDDM).",
            "Check torch.cuda.set_per_process_memory_fraction and the GPU's partitioning (nvidia-smi)."]


def _diagnosis(f: OomFacts, what_ifs: list[dict[str, Any]]) -> dict[str, Any]:
    verdict = verdict_of(f)
    return {"verdict": verdict, "requested_bytes": f.requested or 0, "reserved_bytes": f.reserved,
            "allocated_bytes": f.allocated, "device_total_bytes": f.total, "device_free_bytes": f.free,
            "largest_free_block": f.largest_free_block, "advice": _advice(verdict, f, what_ifs),
            "what_if": what_ifs, "device": f.device, "event": f.event}


def facts_from_message(msg: OomMessage) -> OomFacts:
    return OomFacts(msg.requested, msg.reserved, msg.allocated, msg.total, msg.free, None, msg.allowed,
                    msg.other_processes, msg.era, msg.device)


def diagnose_message(text: str) -> list[dict[str, Any]]:
    """Every OOM message in `text`, diagnosed from its own figures."""
    out = []
    for line in find_messages(text):
        msg = parse_message(line)
        if msg is not None:
            out.append(_diagnosis(facts_from_message(msg), []))
    return out


def diagnose(analysis: Analysis, message: str | None = None, simulate: bool = True) -> list[dict[str, Any]]:
    """Every OOM a snapshot records (its `oom` trace entries), and the one a pasted message describes."""
    out = []
    for device, replay in analysis.replays.items():
        hits = (replay.trace.action == OOM).nonzero()[0].tolist()
        what_ifs = _what_ifs(analysis, device) if hits and simulate else []
        for k in hits:
            out.append(_diagnosis(_facts_at(analysis, device, k), what_ifs))
    if message:
        parsed = (parse_message(line) for line in find_messages(message))
        out.extend(_with_end_state(analysis, msg) for msg in parsed if msg is not None)
    for oom in out:
        oom["notes"] = oom_notes(analysis, oom)  # private pools and pending frees of the state read
    return out


def _facts_at(analysis: Analysis, device: int, k: int) -> OomFacts:
    replay = analysis.replays[device]
    s = replay.series
    return OomFacts(int(replay.trace.size[k]), int(s["reserved"][k]), int(s["allocated"][k]), None,
                    int(replay.trace.addr[k]), int(s["largest_gap"][k]), None, [], "trace", device, k)


def _with_end_state(analysis: Analysis, msg: OomMessage) -> dict[str, Any]:
    facts = facts_from_message(msg)
    device = msg.device if msg.device in analysis.replays else next(iter(analysis.replays), None)
    if device is not None:
        fig = state_figures(analysis.snapshot.segments_of(device))
        facts.largest_free_block = fig.largest_free_block
        facts.reserved = facts.reserved if facts.reserved is not None else fig.reserved_bytes
        facts.allocated = facts.allocated if facts.allocated is not None else fig.allocated_bytes
        facts.device = device
    return _diagnosis(facts, [])


def _what_ifs(analysis: Analysis, device: int) -> list[dict[str, Any]]:
    capacity = recorded_capacity(analysis, device)
    runs = [("recorded settings", analysis.settings)] + [(c, parse_alloc_conf(c)) for c in WHAT_IF_CONFS]
    out = []
    for label, settings in runs:
        result = run_free(analysis, device, settings, capacity)
        peak = result.allocator.peaks.reserved
        ok = result.oom_count == 0
        summary = (f"with {label} peak reserved would have been {fb(peak)} of {fb(capacity)}: "
                   + ("no OOM" if ok else f"{result.oom_count} OOM(s), the first at event {result.ooms[0]['event']}"))
        out.append({"alloc_conf": label, "device_memory_bytes": capacity, "peak_reserved_bytes": peak,
                    "ooms": result.oom_count, "avoids_oom": ok, "summary": summary})
    return out
