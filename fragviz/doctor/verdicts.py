"""The OOM doctor: for each "CUDA out of memory", a verdict with its numbers, what to do, and where a
trace exists, what the suggested settings would have changed (by free-run simulation).

The verdicts and their order are `cause.py`'s: exhaustion, capacity_cap, outside_pytorch, fragmentation, and
undetermined where the figures read do not tell.
"""
from __future__ import annotations

from dataclasses import replace

from fragviz.replay.analysis import Analysis
from fragviz.doctor.advice import advice
from fragviz.doctor.cause import verdict_of
from fragviz.doctor.consistency import figure_notes, figure_warnings
from fragviz.doctor.facts import DEFRAG_MARGIN, OomFacts
from fragviz.doctor.inforce import InForce, in_force_of_snapshot, in_force_of_text
from fragviz.doctor.message import OomMessage, find_messages, parse_message
from fragviz.doctor.pools import oom_notes, request_pool_at
from fragviz.doctor.records import PUBLIC_KEYS, Diagnosis, WhatIfEntry
from fragviz.doctor.together import DeviceMismatch, Together, read_together
from fragviz.doctor.whatifs import cannot_answer, what_if_entries
from fragviz.model.metrics import fragmentation, pool_of, state_figures
from fragviz.model import OOM

__all__ = ["DEFRAG_MARGIN", "PUBLIC_KEYS", "Diagnosis", "OomFacts", "diagnose", "diagnose_message",
           "diagnose_message_with", "verdict_of"]


def _diagnosis(f: OomFacts, what_ifs: list[WhatIfEntry], in_force: InForce,
               warnings: list[str] | None = None) -> Diagnosis:
    """One OOM's verdict, figures and advice; `warnings` say what limits the diagnosis, `notes` (added to by
    `diagnose`) what the state read holds besides."""
    verdict = verdict_of(f)
    return Diagnosis(
        verdict=verdict, device=f.device, requested_bytes=f.requested or 0, reserved_bytes=f.reserved,
        allocated_bytes=f.allocated, device_total_bytes=f.total, device_free_bytes=f.free, allowed_bytes=f.allowed,
        largest_free_block=f.largest_free_block, non_releasable_bytes=f.non_releasable, fragmentation=f.fragmentation,
        processes=tuple(f.processes), advice=tuple(advice(verdict, f, what_ifs, in_force)), what_if=tuple(what_ifs),
        warnings=tuple(list(warnings or []) + figure_warnings(f, verdict)), notes=tuple(figure_notes(f)),
        event=f.event)


def facts_from_message(msg: OomMessage) -> OomFacts:
    return OomFacts(msg.requested, msg.reserved, msg.allocated, msg.total, msg.free, None, msg.allowed,
                    msg.processes, msg.era, msg.device, this_process=msg.this_process, unread=msg.unread)


def parsed_messages(text: str, job_pid: int | None = None) -> list[OomMessage]:
    """Every OOM message in `text` that can be read."""
    parsed = (parse_message(m, job_pid) for m in find_messages(text))
    return [msg for msg in parsed if msg is not None]


def diagnose_message(text: str, job_pid: int | None = None) -> list[Diagnosis]:
    """Every OOM message in `text`, diagnosed from its own figures. `job_pid`: the job's own process, where the
    user knows it, so that it is never counted among the others."""
    in_force = in_force_of_text(text)
    return [_diagnosis(facts_from_message(msg), [], in_force) for msg in parsed_messages(text, job_pid)]


def diagnose(analysis: Analysis, message: str | None = None, simulate: bool = True, strict_device: bool = False,
             job_pid: int | None = None) -> list[Diagnosis]:
    """Every OOM a snapshot records (its `oom` trace entries), and the ones a pasted message describes. With
    `strict_device`, a message about another device than the snapshot's states raises DeviceMismatch instead
    of being diagnosed alone."""
    in_force = in_force_of_snapshot(analysis)
    out: list[Diagnosis] = []
    what_ifs: dict[int, list[WhatIfEntry]] = {}
    for device, replay in analysis.replays.items():
        hits = (replay.trace.action == OOM).nonzero()[0].tolist()
        what_ifs[device] = what_if_entries(analysis, device, in_force) if hits and simulate else []
        for k in hits:
            out.append(_diagnosis(_facts_at(analysis, device, k), what_ifs[device], in_force))
    if message:
        out.extend(_messages_with_snapshot(analysis, message, what_ifs, simulate, strict_device, job_pid))
    return [_with_pool_notes(analysis, oom) for oom in out]


def diagnose_message_with(analysis: Analysis, message: str) -> list[Diagnosis]:
    """The OOM messages in `message` read with the snapshot, as `diagnose` reads them, without what-ifs (for a
    page that shows the snapshot's own OOMs already)."""
    out = _messages_with_snapshot(analysis, message, {}, False, False, None)
    return [_with_pool_notes(analysis, oom) for oom in out]


def _with_pool_notes(analysis: Analysis, oom: Diagnosis) -> Diagnosis:
    """The diagnosis with the notes on the private pools and pending frees of the state it read."""
    return replace(oom, notes=oom.notes + tuple(oom_notes(analysis, oom.device, oom.event)))


def _messages_with_snapshot(analysis: Analysis, message: str, what_ifs: dict[int, list[WhatIfEntry]],
                            simulate: bool, strict: bool, job_pid: int | None) -> list[Diagnosis]:
    return [_with_snapshot(analysis, msg, message, what_ifs, simulate, strict)
            for msg in parsed_messages(message, job_pid)]


def _facts_at(analysis: Analysis, device: int, k: int) -> OomFacts:
    replay = analysis.replays[device]
    s = replay.series
    facts = OomFacts(int(replay.trace.size[k]), int(s["reserved"][k]), int(s["allocated"][k]), None,
                     int(replay.trace.addr[k]), int(s["largest_gap"][k]), None, (), "trace", device, k)
    facts.non_releasable = int(s["non_releasable"][k])
    facts.fragmentation = fragmentation(facts.non_releasable, int(s["reserved"][k]))
    pool = request_pool_at(analysis, device, k)  # a general request cannot use private pools' free memory
    if pool is not None:
        facts.pool_free, facts.largest_free_block = pool.free_bytes, pool.largest_free_block
    return facts


def _with_snapshot(analysis: Analysis, msg: OomMessage, text: str, what_ifs: dict[int, list[WhatIfEntry]],
                   simulate: bool, strict: bool) -> Diagnosis:
    """The message with the snapshot's figures where both can be one run on one device; alone, and saying why,
    where not."""
    facts = facts_from_message(msg)
    together = read_together(analysis, msg)
    if together.device_refusal is not None and strict:
        raise DeviceMismatch(f"a message is not read with another device's state: "
                             f"{together.device_refusal}. Pass the snapshot of the message's device, or leave out "
                             "the snapshot to diagnose the message alone.")
    if not together.same_run or together.device is None:
        return _alone(facts, text, together)
    in_force = in_force_of_snapshot(analysis)
    in_force = in_force if in_force.source else in_force_of_text(text)
    device = together.device
    facts.device = device
    # which device's state is read: said where the snapshot holds several, or the message named none
    used = (f"Read with the snapshot's device {device} state ({together.how})."
            if len(analysis.replays) > 1 or msg.device is None else None)
    if together.oom_event is not None:
        # the snapshot records this very OOM: its state then gives the largest free block, its trace the what-ifs
        at_oom = _facts_at(analysis, device, together.oom_event)
        facts.largest_free_block = at_oom.largest_free_block
        facts.non_releasable, facts.fragmentation = at_oom.non_releasable, at_oom.fragmentation
        return _with_note(_diagnosis(facts, what_ifs.get(device, []), in_force), used)
    segments = analysis.snapshot.segments_of(device)
    fig = state_figures(segments)
    facts.largest_free_block = pool_of(segments).largest_free_block  # what a general request could get
    facts.non_releasable, facts.fragmentation = fig.non_releasable_bytes, fig.fragmentation
    facts.reserved = facts.reserved if facts.reserved is not None else fig.reserved_bytes
    facts.allocated = facts.allocated if facts.allocated is not None else fig.allocated_bytes
    entries = cannot_answer(analysis, device, in_force) if simulate else []
    return _with_note(_diagnosis(facts, entries, in_force, [_final_state_warning(together)]), used)


def _alone(facts: OomFacts, text: str, together: Together) -> Diagnosis:
    if together.unmatched is not None:
        note = (f"The snapshot's state is not read with the message: {together.unmatched}. The message is diagnosed "
                "from its own figures.")
    else:
        note = ("The message and the snapshot cannot be the same run: " + "; ".join(together.conflicts)
                + ". The message is diagnosed from its own figures; the snapshot's are not used.")
    return _diagnosis(facts, [], in_force_of_text(text), [note])


def _final_state_warning(together: Together) -> str:
    device = together.device
    if not together.ooms_elsewhere:
        return ("The largest free block is the snapshot's final state's: the snapshot records no OOM, so its state "
                "at the moment of the message is not known.")
    elsewhere = ", ".join(f"{n} on device {d}" for d, n in together.ooms_elsewhere.items())
    return (f"The largest free block is device {device}'s final state's: the snapshot records no OOM on device "
            f"{device} (it records {elsewhere}), so device {device}'s state at the moment of the message is not known.")


def _with_note(diagnosis: Diagnosis, note: str | None) -> Diagnosis:
    return diagnosis if note is None else replace(diagnosis, notes=(note, *diagnosis.notes))
