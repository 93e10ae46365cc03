"""fragviz.predict.steps and stepped: a program whose number of steps follows the knob, worked out by hand.

`growing(k)`: weights (8 MiB), a cache of 1 MiB, then k steps, each a temporary of 1 MiB and a cache one MiB
longer than the last (the old one and the temporary freed): at step s, 8 + (1 + s) + 1 + (2 + s) MiB live, so the
peak is 2k + 10 MiB. `epoch(b)`: weights, then 64 / b steps of an activation of b MiB and a loss of 64 KiB.
"""
from __future__ import annotations

from fragviz.predict import plan, predict
from fragviz.predict.stepped import StepPlan, loops_of
from fragviz.predict.steps import Loop, find_loop, fit_count
from tests.support.helpers import KiB, MiB
from tests.unit.test_predict import RECORDED, Program, workload


def growing(k: int) -> dict:
    p = Program()
    w = p.alloc("weights", 8 * MiB)
    cache = p.alloc("attn", 1 * MiB)
    for s in range(k):
        tmp = p.alloc("mlp", 1 * MiB)
        new = p.alloc("attn", (2 + s) * MiB)
        p.free(tmp)
        p.free(cache)
        cache = new
    p.free(cache)
    p.free(w)
    return p.snapshot()


def epoch(b: int) -> dict:
    p = Program()
    w = p.alloc("weights", 8 * MiB)
    for _ in range(64 // b):
        x = p.alloc("act", b * MiB)
        y = p.alloc("loss", 64 * KiB)
        p.free(y)
        p.free(x)
    p.free(w)
    return p.snapshot()


def recorded(program, knobs):
    return [workload(program(k), f"{program.__name__}_{k}.pickle") for k in knobs]


def test_the_loop_is_the_body_that_repeats_between_a_prefix_and_a_suffix():
    assert find_loop(list("pqabcabcabcz")) == Loop(2, 3, 3)
    assert find_loop(list("abcd")) is None  # nothing repeats
    assert find_loop(list("aaaa")) == Loop(0, 1, 4)


def test_the_count_follows_the_knob_or_its_inverse():
    tokens = fit_count([16, 32], [15, 31])  # the line through both: S - 1
    assert tokens.at(128) == 127
    assert tokens.bounds_at(128) == (127, 132)  # the power through both: 31 × 4 ** log2(31/15) = 132.4
    steps = fit_count([32, 64, 128], [31, 15, 7])  # 1024 / S - 1, the only line that holds
    assert steps.at(256) == 3 and not steps.ambiguous


def test_a_growing_cache_is_predicted_step_by_step():
    p = plan(recorded(growing, (4, 8, 12)), [4, 8, 12], 16)
    assert isinstance(p, StepPlan)
    assert p.count.at(16) == 16
    got = predict(p, 16, RECORDED, None)
    assert got.runs[0].peak_requested_bytes == (2 * 16 + 10) * MiB
    assert got.runs[0].peak_requested_range == ((2 * 16 + 10) * MiB,) * 2
    notes = got.warnings  # the count of steps, first among them
    assert notes[0].startswith("the number of steps at") and "4 at 4, 8 at 8, 12 at 12, predicted 16 at 16" in notes[0]


def test_two_recordings_give_a_range_that_holds_the_truth():
    p = plan(recorded(growing, (4, 8)), [4, 8], 16)
    run = predict(p, 16, RECORDED, None).runs[0]
    low, high = run.peak_requested_range
    assert low <= (2 * 16 + 10) * MiB <= high  # the last cache, 17 MiB, lies between its laws


def test_the_written_loop_frees_every_allocation_once():
    p = plan(recorded(growing, (4, 8)), [4, 8], 16)
    ops = list(p.ops_at(16))
    allocs = [op.key for op in ops if op.kind == "alloc"]
    frees = [op.key for op in ops if op.kind == "free"]
    assert len(allocs) == 1 + 2 * 16 + 1 == len(set(allocs))  # weights, 16 steps of two, the last cache
    assert sorted(map(repr, frees)) == sorted(map(repr, allocs))
    # fewer steps than recorded: the first and the last kept, still every allocation freed once
    few = list(p.ops_at(2, p.sizes_at(2)))
    assert sorted(repr(op.key) for op in few if op.kind == "free") == sorted(
        repr(op.key) for op in few if op.kind == "alloc")


def test_an_epoch_of_fewer_bigger_steps_is_predicted():
    p = plan(recorded(epoch, (8, 16)), [8, 16], 32)
    assert isinstance(p, StepPlan) and p.count.at(32) == 2  # 64 / 32
    run = predict(p, 32, RECORDED, None).runs[0]
    assert run.peak_requested_bytes == 8 * MiB + 32 * MiB + 64 * KiB


def test_the_same_count_in_every_recording_is_no_loop_to_extrapolate():
    same = recorded(growing, (4, 4))
    assert loops_of(same, 0) is None
    assert loops_of(recorded(growing, (4, 8)), 1) is not None


def test_sizes_and_bounds_agree_on_the_count():
    p = plan(recorded(growing, (4, 8)), [4, 8], 16)
    low, high = p.bounds_at(16)
    assert len(p.sizes_at(16)) == len(low) == len(high) == 1 + 2 * 16 + 1


def test_an_oom_inside_the_written_loop_names_the_site_of_its_position():
    p = plan(recorded(growing, (4, 8, 12)), [4, 8, 12], 16)
    oom = predict(p, 16, RECORDED, 48 * MiB).runs[0].oom  # every allocation of the loop is a written one
    assert oom is not None and oom.site == "/home/u/model.py:20 attn"
    assert oom.requested_bytes in {(2 + s) * MiB for s in range(16)}  # a step's new cache
