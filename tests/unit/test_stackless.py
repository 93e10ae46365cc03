"""Allocations without a recorded stack: the reason given for them, and the rule for parameters (inferred), on
cases worked out by hand; the report (read from blocks) and the views (read from lifetimes) agree."""
from __future__ import annotations

import pickle

import numpy as np

from fragviz.replay.analysis import analyze
from fragviz.doctor.report import report_of, report_text
from fragviz.snapshot import load_snapshot_bytes
from fragviz.ui.data.usage import device_usage
from fragviz.usage.kinds import KINDS
from fragviz.usage.lifetimes import Lifetimes
from fragviz.usage.stackless import (BEFORE_RECORDING, INFERRED_TEXT, NO_STACKS, REASON_TEXT, TRACE_WITHOUT_STACKS,
                                     stackless)
from fragviz.usage.stacks import stack_facts
from tests.support.helpers import MiB, block, ev, frames, segment, snapshot

S = 0x7F00_0000_0000
BACKWARD = frames("train", "backward")  # a frame named backward: gradients
OPTIMIZER = [{"filename": "/x/site-packages/torch/optim/adam.py", "line": 90, "name": "_init_group"},
             *frames("train")]


NAMES = {0: "W", 8: "G", 10: "O", 14: "P"}  # by offset in the segment, in MiB


def training_step(optimizer: bool = True, trace_frames: bool = True, block_frames: bool = False) -> dict:
    """W (8 MiB, no stack) live before the trace and to its end; P (1 MiB, no stack) live before the trace and
    freed in it (its block: the 2 MiB gap it leaves); G (2 MiB, a backward stack) and O (4 MiB, an optimizer stack,
    or one no rule matches) allocated in it.

    States 0..4: event 0 allocs G, 1 allocs O, 2 and 3 free P. Requested bytes peak in state 2 (W, P, G, O).
    """
    g_stack, o_stack = (BACKWARD, OPTIMIZER if optimizer else frames("train")) if trace_frames else (None, None)
    final = segment(S, [block(S, 8 * MiB),
                        block(S + 8 * MiB, 2 * MiB, stack=BACKWARD if block_frames else g_stack),
                        block(S + 10 * MiB, 4 * MiB, stack=OPTIMIZER if block_frames else o_stack),
                        block(S + 14 * MiB, 2 * MiB, "inactive")])
    with_frames = (lambda e, f: {**e, "frames": f}) if trace_frames else (lambda e, f: e)
    trace = [with_frames(ev("alloc", S + 8 * MiB, 2 * MiB), g_stack),
             with_frames(ev("alloc", S + 10 * MiB, 4 * MiB), o_stack),
             ev("free_requested", S + 14 * MiB, 1 * MiB), ev("free_completed", S + 14 * MiB, 1 * MiB)]
    return snapshot([final], trace)


def analysed(data: dict):
    return analyze(load_snapshot_bytes(pickle.dumps(data), "case.pickle"))


def views_of(analysis):
    """The views' reading: every allocation's kind from the trace's lifetimes, and the card's notes."""
    snap = analysis.snapshot
    usage = device_usage(analysis.replays[0].lifetimes(), stack_facts(snap.frames, snap.stacks))
    lt = usage.lifetimes
    by_name = {NAMES[(int(address) - S) // MiB]: KINDS[k] for address, k in zip(lt.address, usage.kind)}
    return by_name, usage.stackless.notes()


def test_a_training_steps_stackless_memory_live_throughout_is_parameters_inferred():
    analysis = analysed(training_step())
    d = report_of(analysis).devices[0]
    assert d.kinds == {**dict.fromkeys(KINDS, 0), "parameters_inferred": 8 * MiB, "gradients": 2 * MiB,
                       "optimizer_state": 4 * MiB}
    # P, freed in the trace, is not live throughout: no stack recorded, from before the recording
    assert d.peak_requested_state == 2
    assert d.kinds_at_peak["parameters_inferred"] == 8 * MiB and d.kinds_at_peak["no_stack"] == 2 * MiB
    assert d.kind_notes == {"parameters_inferred": INFERRED_TEXT, "no_stack": REASON_TEXT[BEFORE_RECORDING]}
    kinds, notes = views_of(analysis)
    assert kinds == {"W": "parameters_inferred", "P": "no_stack", "G": "gradients", "O": "optimizer_state"}
    assert notes == d.kind_notes
    text = report_text(analysis)
    assert "parameters_inferred 8.00 MiB" in text and f"parameters_inferred: {INFERRED_TEXT}" in text
    assert "other" not in text.split("by kind")[1].split("\n")[0]


def test_without_optimizer_state_no_parameters_are_inferred():
    analysis = analysed(training_step(optimizer=False))
    d = report_of(analysis).devices[0]
    assert d.kinds["parameters_inferred"] == 0 and d.kinds["no_stack"] == 8 * MiB
    assert d.kinds["other"] == 4 * MiB  # O's stack ("train") matches no rule: other, and only that
    assert d.kind_notes == {"no_stack": REASON_TEXT[BEFORE_RECORDING]}
    assert views_of(analysis)[0]["W"] == "no_stack"


def test_a_snapshot_without_any_stack_says_it_was_recorded_without_stacks():
    analysis = analysed(training_step(trace_frames=False))
    d = report_of(analysis).devices[0]
    assert d.kinds == {**dict.fromkeys(KINDS, 0), "no_stack": 14 * MiB}
    assert d.kind_notes == {"no_stack": REASON_TEXT[NO_STACKS]}
    kinds, notes = views_of(analysis)
    assert set(kinds.values()) == {"no_stack"} and notes == d.kind_notes


def test_a_trace_without_stacks_beside_blocks_with_stacks_was_recorded_with_context_state():
    # context='state': the final blocks carry stacks, the trace's entries none
    analysis = analysed(training_step(trace_frames=False, block_frames=True))
    kinds, notes = views_of(analysis)
    # G and O were allocated in the trace: their trace entries have no stack; W and P predate it
    assert kinds == {"W": "no_stack", "P": "no_stack", "G": "no_stack", "O": "no_stack"}
    assert notes == {"no_stack": f"{REASON_TEXT[BEFORE_RECORDING]}; {REASON_TEXT[TRACE_WITHOUT_STACKS]}"}


def test_the_rule_needs_a_trace_and_memory_live_from_its_first_state_to_its_last():
    analysis = analysed(training_step())
    snap = analysis.snapshot
    lt = analysis.replays[0].lifetimes()
    facts = stack_facts(snap.frames, snap.stacks)
    _, kind = facts.of(lt.stack)
    found = stackless(lt, kind, True)
    inferred = [int(a) for a, k in zip(lt.address, found.kinds) if KINDS[k] == "parameters_inferred"]
    assert inferred == [S] and found.inferred_addresses == {S}
    # the final state alone (no trace): nothing is live "throughout" a step it cannot see
    before = lt.start == 0
    cols = {c: v[before] for c, v in lt.columns().items()}
    cols["end"] = np.ones(int(before.sum()), np.int64)
    alone = stackless(Lifetimes.from_columns(cols, 1), kind[before], True)
    assert not alone.inferred_addresses and alone.reasons == (BEFORE_RECORDING,)
    # a snapshot without stacks: never inferred, whatever the kinds say
    assert not stackless(lt, kind, False).inferred_addresses
