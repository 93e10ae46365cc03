"""What-ifs: the recorded workload free-run under other settings or on another device size, next to the
recording, and honest about what the simulation can tell.

A what-if says what it did not compute: a device without a trace (or without one `alloc`) has no workload
and gets a refusal with the reason; a trace that starts mid-run is simulated from the reconstructed start,
and the answer says that start is inherited and what that limits; a claim about OOMs ("avoids the OOM",
"would not help", "no OOM") needs a known device size and, where the recording ran out of memory, a model
that runs out of memory too under the recorded settings. A recording that ends at its OOM (`ends_at_failure`)
cannot show what a program that gets past it does next: such a run "gets past the recorded failure", never
"avoids" it.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Sequence

import numpy as np

from fragviz.allocator.config import AllocatorSettings, parse_alloc_conf
from fragviz.allocator.state import snapshot_dict
from fragviz.replay.analysis import Analysis, trace_totals
from fragviz.base.errors import FragvizError
from fragviz.model.metrics import fragmentation, state_figures
from fragviz.model import ALLOC, OOM
from fragviz.simulate.freerun import FreeRunResult, free_run
from fragviz.simulate.reshape import CodeChange, Reshaper, changes_label
from fragviz.simulate.records import (AVOIDS_OOM, CANNOT_ANSWER, GETS_PAST, NO_OOM, SIMULATED, STILL_OOMS, UNKNOWN,
                                      CertainOom, DeviceMemory, DeviceWhatIf, OomAt, RunFigures, StartState,
                                      WhatIfResult)
from fragviz.base.units import format_bytes as fb

__all__ = ["AVOIDS_OOM", "CANNOT_ANSWER", "GETS_PAST", "NO_OOM", "SIMULATED", "STILL_OOMS", "UNKNOWN",
           "DeviceMemory", "DeviceWhatIf", "NothingToSimulate", "WhatIfResult", "certain_oom", "device_memory",
           "ends_at_failure", "judge", "nothing_to_follow", "nothing_to_simulate", "recorded_capacity",
           "recorded_run", "refusal", "refusal_for", "reshaper", "run_free", "simulate_device", "simulated_snapshot",
           "start_state", "what_if", "what_if_label"]
Progress = Callable[[float], None]  # the share of the work done, 0 to 1
# The recording goes on past its last OOM only where the program then made at least this share of the trace's
# allocations: an exception's unwinding only frees, and a handler that logs and exits allocates little, while a
# program that caught the OOM and went on (the next batch, the next request) makes a step's worth of them.
GOES_ON_SHARE = 0.1


class NothingToSimulate(FragvizError):
    """No device of the snapshot has a workload to replay."""


def recorded_capacity(analysis: Analysis, device: int) -> int | None:
    """What PyTorch could reserve on the device, as far as the trace tells: reserved + free at its first OOM."""
    replay = analysis.replays[device]
    hits = (replay.trace.action == OOM).nonzero()[0]
    if not len(hits):
        return None
    k = int(hits[0])
    return int(replay.series["reserved"][k]) + int(replay.trace.addr[k])


def device_memory(analysis: Analysis, device: int, given: int | None) -> DeviceMemory:
    if given is not None:
        return DeviceMemory(given, "given")
    found = recorded_capacity(analysis, device)
    return DeviceMemory(found, "the first recorded OOM" if found is not None else "unknown")


def refusal(analysis: Analysis, device: int) -> str | None:
    """Why the device's trace holds nothing to simulate, or None when it holds a workload."""
    trace = analysis.replays[device].trace
    return refusal_for(device, len(trace), int((trace.action == ALLOC).sum()))


def refusal_for(device: int, events: int, allocs: int) -> str | None:
    """`refusal` from the counts alone (a stored snapshot's summary has them)."""
    if not events:
        return (f"device {device} has no trace (memory history was off when the snapshot was taken), so there is "
                "no workload to replay: record one with torch.cuda.memory._record_memory_history() before the "
                "steps of interest")
    if not allocs:
        return f"device {device}'s trace holds {events} events but no alloc, so there is no workload to replay"
    return None


def run_free(analysis: Analysis, device: int, settings: AllocatorSettings, capacity: int | None,
             record: bool = False, progress=None, series_points: int | None = None,
             reshape: Reshaper | None = None) -> FreeRunResult:
    replay = analysis.replays[device]
    return free_run(replay.trace, replay.segments_at(0), settings, capacity, replay.series["reserved"].tolist(),
                    record=record, progress=progress, series_points=series_points, reshape=reshape)


def reshaper(analysis: Analysis, device: int, changes: Sequence[CodeChange]) -> Reshaper | None:
    """The code changes as they apply to the device's trace (None: no change asked for)."""
    if not changes:
        return None
    return Reshaper(analysis.replays[device].trace, analysis.snapshot.stack_frames, changes)


def recorded_run(analysis: Analysis, device: int, memory: DeviceMemory) -> RunFigures:
    """The recording's own figures, as a free-run's are given."""
    replay = analysis.replays[device]
    s, trace = replay.series, replay.trace
    totals = trace_totals(analysis.snapshot, device)
    hits = (trace.action == OOM).nonzero()[0].tolist()
    ooms = tuple(OomAt(k, int(trace.size[k]), int(s["reserved"][k]), int(s["largest_gap"][k])) for k in hits)
    return RunFigures(analysis.settings, memory.bytes, totals.peak_reserved, int(s["allocated"].max()),
                      totals.peak_requested, state_figures(analysis.snapshot.segments_of(device)).fragmentation,
                      ooms, len(ooms), recorded_peak_fragmentation(analysis, device))


def recorded_peak_fragmentation(analysis: Analysis, device: int) -> float | None:
    """The recording's fragmentation at its reserved peak, at its fullest (the first state with the most allocated
    bytes among those with the most reserved), as a free-run's (freerun.PeakState) is read; None without a series."""
    s = analysis.replays[device].series
    if not len(s.get("reserved", ())):
        return None
    reserved, allocated = s["reserved"], s["allocated"]
    top = np.flatnonzero(reserved == reserved.max())
    k = int(top[np.argmax(allocated[top])])
    return fragmentation(int(s["non_releasable"][k]), int(reserved[k]))


def start_state(analysis: Analysis, device: int) -> StartState:
    """What the simulation inherits at the start of the trace, and which part of the answer that limits."""
    replay = analysis.replays[device]
    segments, blocks = replay.pre_trace_segments, replay.pre_trace_blocks
    reserved, allocated = int(replay.series["reserved"][0]), int(replay.series["allocated"][0])
    disagreements = [w.split(": ", 1)[-1] for w in replay.warnings + list(trace_totals(analysis.snapshot, device).warnings)]
    notes = []
    if segments or blocks:
        held = (f"{segments} segments ({fb(reserved)} reserved) and {blocks} live blocks ({fb(allocated)}) predate "
                "its first event" if blocks else
                f"{segments} segments ({fb(reserved)}) were reserved before its first event, with no live block")
        notes.append(f"The trace starts mid-run: {held}. The simulation starts from them as recorded: their placement "
                     "is as recorded, not as the simulated settings would have laid it out, and the peaks and OOMs "
                     "are those of the traced part of the run only.")
    if disagreements:
        notes.append(f"The trace and the final state disagree ({disagreements[0]}), so the start is reconstructed "
                     "only as far as the trace tells: memory the trace does not explain is missing from the "
                     "simulation, and its figures may be low.")
    return StartState(bool(segments or blocks), reserved, allocated, segments, blocks, not disagreements, tuple(notes))


def ends_at_failure(analysis: Analysis, device: int) -> bool:
    """Whether the device's trace ends at (or soon after) its last OOM: fewer than GOES_ON_SHARE of its
    allocations come after it. Such a recording holds nothing of what the program would do past the failure (the
    rest of the step, the optimizer's first step, a longer sequence), so a run that gets past it is not shown to
    avoid it."""
    trace = analysis.replays[device].trace
    hits = (trace.action == OOM).nonzero()[0]
    if not len(hits):
        return False
    allocs = trace.action == ALLOC
    return int(allocs[int(hits[-1]):].sum()) < GOES_ON_SHARE * max(1, int(allocs.sum()))


def judge(label: str, recorded: RunFigures, baseline: RunFigures, given: RunFigures,
          memory: DeviceMemory, ends_there: bool = False) -> tuple[str, str]:
    """The outcome and the sentence that says it, claiming only what the simulation covered (`ends_there`: the
    recording ends at its failure, `ends_at_failure`)."""
    if memory.bytes is None:
        return UNKNOWN, ("the device size is unknown (the trace records no OOM, and no device memory was given), so "
                         "the simulation assumed an unlimited device and cannot tell whether any run runs out of memory")
    first = recorded.ooms[0] if recorded.ooms else None
    if first is not None and not baseline.oom_count:
        return UNKNOWN, (f"the model does not reproduce the recorded OOM (event {first.event}) under the recorded "
                         f"settings, so it cannot tell whether {label} would avoid it")
    if given.oom_count:
        at = f"{given.oom_count} OOM(s), the first at event {given.ooms[0].event}"
        if first is not None:
            return STILL_OOMS, f"{label} would not help: simulated, the run still runs out of memory ({at})"
        return STILL_OOMS, f"with {label} the run runs out of memory on a device of {fb(memory.bytes)} ({at})"
    if first is not None and ends_there:
        return GETS_PAST, (f"{label} gets past the recorded failure (event {first.event}): simulated on "
                           f"{fb(memory.bytes)}, no OOM up to the end of the recording; the rest of the run was not "
                           "recorded, so whether it runs out of memory later (the rest of the step, the next steps) "
                           "cannot be told")
    if first is not None:
        return AVOIDS_OOM, (f"{label} avoids the recorded OOM: simulated on {fb(memory.bytes)}, no OOM (the model "
                            "reproduces the recorded one under the recorded settings)")
    return NO_OOM, f"with {label} the run fits a device of {fb(memory.bytes)}: no OOM"


def simulate_device(analysis: Analysis, device: int, runs: list[tuple[str, AllocatorSettings]],
                    given_memory: int | None = None, series_points: int | None = None,
                    progress: Progress | None = None, changes: Sequence[CodeChange] = ()) -> list[DeviceWhatIf]:
    """Each of `runs` (label, settings) on one device, next to the recording and the recorded settings' run on the
    recorded workload; with `changes` (code what-ifs, simulate.reshape), the runs' workload changed so, and each
    result's `changes` says what each change touched. With
    `series_points`, each result's `series` holds its run's figures to draw."""
    reason = refusal(analysis, device)
    shaped = reshaper(analysis, device, changes) if reason is None else None
    reason = reason or (shaped.refusal(device) if shaped is not None else None)
    effects = shaped.effects() if shaped is not None else tuple(
        {"change": c.how, "target": c.target, "label": c.label} for c in changes)
    if reason is not None:
        return [DeviceWhatIf(device, label, reason, changes=effects) for label, _ in runs]
    memory = device_memory(analysis, device, given_memory)
    recorded, start = recorded_run(analysis, device, memory), start_state(analysis, device)
    if memory.bytes is not None and start.reserved_bytes > memory.bytes:
        reason = (f"the trace starts with {fb(start.reserved_bytes)} already reserved on device {device}, more than "
                  f"the {fb(memory.bytes)} device asked about: that start state cannot exist on it")
        return [DeviceWhatIf(device, label, reason, changes=effects) for label, _ in runs]
    steps = len(runs) + 1
    baseline = run_free(analysis, device, analysis.settings, memory.bytes, progress=_part(progress, 0, steps))
    # a request too big for any setting is the recorded workload's: a code change may shrink it
    base = baseline.figures()
    certain = certain_oom(analysis, device, memory.bytes) if shaped is None else None
    out = []
    for i, (label, settings) in enumerate(runs, 1):
        run = run_free(analysis, device, settings, memory.bytes, progress=_part(progress, i, steps),
                       series_points=series_points, reshape=shaped)
        given = run.figures()
        outcome, claim = judge(label, recorded, base, given, memory, ends_at_failure(analysis, device))
        out.append(DeviceWhatIf(device, label, None, given, base, recorded, start, memory, outcome, claim, certain,
                                run.series.timeline() if run.series is not None else None, effects,
                                changed_kinds=shaped.by_kind() if shaped else (),
                                change_notes=shaped.notes() if shaped else ()))
    return out


def certain_oom(analysis: Analysis, device: int, memory: int | None) -> CertainOom | None:
    """The trace's largest single request where it alone exceeds the device: an OOM no setting can avoid."""
    replay = analysis.replays.get(device)
    if memory is None or replay is None:
        return None
    allocs = (replay.trace.action == ALLOC).nonzero()[0]
    if not len(allocs):
        return None
    k = int(allocs[int(np.argmax(replay.trace.size[allocs]))])
    size = int(replay.trace.size[k])
    return CertainOom(k, size, memory) if size > memory else None


def _part(progress: Progress | None, i: int, steps: int):
    if progress is None:
        return None
    return lambda done, total: progress((i + done / max(1, total)) / steps)


def what_if(analysis: Analysis, conf: str | None, device_memory: int | None = None,
            changes: Sequence[CodeChange] = ()) -> WhatIfResult:
    """Free-run every device under `conf` (None: the recorded settings), its workload changed by `changes` (code
    what-ifs), next to the recording (`--alloc-conf`, `--scale`, `--bucket`, `--paged-kv`).

    Raises NothingToSimulate when no device has a workload (the reasons, one per device, in one line)."""
    settings = analysis.settings if conf is None else parse_alloc_conf(conf)
    label = what_if_label(conf, changes)
    results = [r for device in analysis.replays
               for r in simulate_device(analysis, device, [(label, settings)], device_memory, changes=changes)]
    if changes:
        results = [replace(r, alloc_conf=conf) for r in results]
    if all(r.reason is not None for r in results):
        raise NothingToSimulate(nothing_to_simulate(analysis, results))
    return WhatIfResult(tuple(results))


def what_if_label(conf: str | None, changes: Sequence[CodeChange] = ()) -> str:
    """What a what-if is called: its settings (as given, or the recorded ones) and its code changes."""
    settings = "the recorded settings" if conf is None else (conf or "the default settings")
    if not changes:
        return settings
    return changes_label(changes) + ("" if conf is None else f", under {settings}")


def nothing_to_simulate(analysis: Analysis, results: list[DeviceWhatIf]) -> str:
    if not results:
        return f"{analysis.snapshot.source}: cannot simulate: the snapshot holds no device (it is empty)"
    return f"{analysis.snapshot.source}: cannot simulate: " + "; ".join(r.reason for r in results)


def simulated_snapshot(analysis: Analysis, conf: str | None, device_memory: int | None = None,
                       changes: Sequence[CodeChange] = ()) -> dict[str, Any]:
    """The free-run under `conf` (None: the recorded settings), its workload changed by `changes`, as a snapshot
    in PyTorch's format, marked as simulated."""
    settings = analysis.settings if conf is None else parse_alloc_conf(conf)
    allocators = []
    for device in analysis.replays:
        if refusal(analysis, device) is None:
            capacity = device_memory if device_memory is not None else recorded_capacity(analysis, device)
            shaped = reshaper(analysis, device, changes)
            if shaped is None or shaped.refusal(device) is None:
                allocators.append(run_free(analysis, device, settings, capacity, record=True, reshape=shaped).allocator)
    snap = analysis.snapshot
    provenance = {"origin": "simulated", "source": snap.source, "alloc_conf": conf, "device_memory_bytes": device_memory,
                  "mode": "free-run", "changes": [c.flag for c in changes]}
    return snapshot_dict(allocators, snap.frames, snap.stacks, provenance)


def nothing_to_follow(analysis: Analysis) -> str:
    reasons = [r for r in (refusal(analysis, d) for d in analysis.replays) if r is not None]
    if not reasons:
        return f"{analysis.snapshot.source}: nothing to follow: the snapshot holds no device (it is empty)"
    return f"{analysis.snapshot.source}: nothing to follow: " + "; ".join(reasons)
