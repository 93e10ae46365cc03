"""The OOM doctor: for each "CUDA out of memory", a verdict with its numbers, what to do, and where a
trace exists, what the suggested settings would have changed (by free-run simulation).

Verdicts:
  exhaustion       live tensors (or the request itself) need more than the device holds, or what a
                   defragmented cache and the device could give exceeds the request by no more than
                   DEFRAG_MARGIN (the CUDA context and page rounding eat that much)
  fragmentation    cached but unallocated memory plus what the device has free exceeds the request by more
                   than DEFRAG_MARGIN, yet no free block is large enough
  outside_pytorch  a large share of the device is used outside PyTorch's allocator
  capacity_cap     the device had the memory, but a cap (memory fraction, MIG/MPS, the driver) refused it
"""
from __future__ import annotations

from typing import Any

from fragviz.analysis import Analysis
from fragviz.doctor.advice import advice
from fragviz.doctor.facts import DEFRAG_MARGIN, OomFacts
from fragviz.doctor.inforce import InForce, in_force_of_snapshot, in_force_of_text
from fragviz.doctor.message import OomMessage, find_messages, parse_message
from fragviz.doctor.pools import oom_notes, request_pool_at
from fragviz.doctor.together import read_together
from fragviz.doctor.whatifs import cannot_answer, what_if_entries
from fragviz.metrics import pool_of, state_figures
from fragviz.model import OOM

CAP_SLACK = 64 * 1024 * 1024  # device free beyond the request (and a tenth of it) that makes a refusal a cap
# The keys of one OOM in `fragviz doctor --json`; library callers also get "device" and "event".
PUBLIC_KEYS = ("verdict", "requested_bytes", "reserved_bytes", "allocated_bytes", "device_total_bytes",
               "device_free_bytes", "largest_free_block", "advice", "what_if", "warnings", "notes")


def verdict_of(f: OomFacts) -> str:
    """The cause, in this order: an impossible request, a cap, memory held outside PyTorch, fragmentation,
    exhaustion. `slack` keeps a device "free" figure a little above the request (page granularity, the
    driver's own needs) from counting as room; fragmentation needs DEFRAG_MARGIN of room after the request."""
    q, free, cached, outside = f.requested, f.free, f.cached_free, f.outside
    if q is None:
        return "outside_pytorch" if f.era == "driver" else "exhaustion"
    slack = max(CAP_SLACK, q // 10)
    if f.total is not None and q > f.total:
        return "exhaustion"
    if f.allowed is not None and f.reserved is not None and f.reserved + q > f.allowed:
        return "capacity_cap"
    if free is not None and free >= q + slack:
        return "capacity_cap"
    if (outside is not None and outside >= 0.1 * f.total and outside > (cached or 0)
            and outside + (free or 0) + (cached or 0) >= q):
        return "outside_pytorch"
    if cached is not None and f.defrag_room > DEFRAG_MARGIN:
        return "fragmentation"
    return "exhaustion"


def _diagnosis(f: OomFacts, what_ifs: list[dict[str, Any]], in_force: InForce,
               warnings: list[str] | None = None) -> dict[str, Any]:
    """One OOM's verdict, figures and advice; `warnings` say what limits the diagnosis, `notes` (filled by
    `diagnose`) what the state read holds besides."""
    verdict = verdict_of(f)
    return {"verdict": verdict, "requested_bytes": f.requested or 0, "reserved_bytes": f.reserved,
            "allocated_bytes": f.allocated, "device_total_bytes": f.total, "device_free_bytes": f.free,
            "largest_free_block": f.largest_free_block, "advice": advice(verdict, f, what_ifs, in_force),
            "what_if": what_ifs, "warnings": list(warnings or []), "notes": [], "device": f.device,
            "event": f.event}


def facts_from_message(msg: OomMessage) -> OomFacts:
    return OomFacts(msg.requested, msg.reserved, msg.allocated, msg.total, msg.free, None, msg.allowed,
                    msg.other_processes, msg.era, msg.device)


def diagnose_message(text: str) -> list[dict[str, Any]]:
    """Every OOM message in `text`, diagnosed from its own figures."""
    in_force = in_force_of_text(text)
    out = []
    for line in find_messages(text):
        msg = parse_message(line)
        if msg is not None:
            out.append(_diagnosis(facts_from_message(msg), [], in_force))
    return out


def diagnose(analysis: Analysis, message: str | None = None, simulate: bool = True) -> list[dict[str, Any]]:
    """Every OOM a snapshot records (its `oom` trace entries), and the one a pasted message describes."""
    in_force = in_force_of_snapshot(analysis)
    out, what_ifs = [], {}
    for device, replay in analysis.replays.items():
        hits = (replay.trace.action == OOM).nonzero()[0].tolist()
        what_ifs[device] = what_if_entries(analysis, device, in_force) if hits and simulate else []
        for k in hits:
            out.append(_diagnosis(_facts_at(analysis, device, k), what_ifs[device], in_force))
    if message:
        out.extend(_messages_with_snapshot(analysis, message, what_ifs, simulate))
    for oom in out:
        oom["notes"] += oom_notes(analysis, oom)  # private pools and pending frees of the state read
    return out


def diagnose_message_with(analysis: Analysis, message: str) -> list[dict[str, Any]]:
    """The OOM messages in `message` read with the snapshot, as `diagnose` reads them, without what-ifs (for a
    page that shows the snapshot's own OOMs already)."""
    out = _messages_with_snapshot(analysis, message, {}, False)
    for oom in out:
        oom["notes"] += oom_notes(analysis, oom)
    return out


def _messages_with_snapshot(analysis: Analysis, message: str, what_ifs: dict[int, list[dict[str, Any]]],
                            simulate: bool) -> list[dict[str, Any]]:
    parsed = (parse_message(line) for line in find_messages(message))
    return [_with_snapshot(analysis, msg, message, what_ifs, simulate) for msg in parsed if msg is not None]


def _facts_at(analysis: Analysis, device: int, k: int) -> OomFacts:
    replay = analysis.replays[device]
    s = replay.series
    facts = OomFacts(int(replay.trace.size[k]), int(s["reserved"][k]), int(s["allocated"][k]), None,
                     int(replay.trace.addr[k]), int(s["largest_gap"][k]), None, [], "trace", device, k)
    pool = request_pool_at(analysis, device, k)  # a general request cannot use private pools' free memory
    if pool is not None:
        facts.pool_free, facts.largest_free_block = pool.free_bytes, pool.largest_free_block
    return facts


def _with_snapshot(analysis: Analysis, msg: OomMessage, text: str, what_ifs: dict[int, list[dict[str, Any]]],
                   simulate: bool) -> dict[str, Any]:
    """The message with the snapshot's figures where both can be the same run; alone, and saying why, where not."""
    facts = facts_from_message(msg)
    together = read_together(analysis, msg)
    if not together.same_run:
        note = ("The message and the snapshot cannot be the same run: " + "; ".join(together.conflicts)
                + ". The message is diagnosed from its own figures; the snapshot's are not used.")
        return _diagnosis(facts, [], in_force_of_text(text), [note])
    in_force = in_force_of_snapshot(analysis)
    in_force = in_force if in_force.source else in_force_of_text(text)
    device = together.device
    if device is None:
        return _diagnosis(facts, [], in_force)
    facts.device = device
    if together.oom_event is not None:
        # the snapshot records this very OOM: its state then gives the largest free block, its trace the what-ifs
        facts.largest_free_block = _facts_at(analysis, device, together.oom_event).largest_free_block
        return _diagnosis(facts, what_ifs.get(device, []), in_force)
    segments = analysis.snapshot.segments_of(device)
    fig = state_figures(segments)
    facts.largest_free_block = pool_of(segments).largest_free_block  # what a general request could get
    facts.reserved = facts.reserved if facts.reserved is not None else fig.reserved_bytes
    facts.allocated = facts.allocated if facts.allocated is not None else fig.allocated_bytes
    note = ("The largest free block is the snapshot's final state's: the snapshot records no OOM, so its state at "
            "the moment of the message is not known.")
    entries = cannot_answer(analysis, device, in_force) if simulate else []
    return _diagnosis(facts, entries, in_force, [note])
