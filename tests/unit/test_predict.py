"""fragviz.predict on programs small enough to work out by hand: each law read off exact sizes, two recordings
matched allocation to allocation, a program predicted at a bigger size and free-run (its peaks, its OOM and where),
what does not match said (and a prediction refused past the limit), and the largest size that fits a device.

The recordings here are written by the allocator model itself (`DeviceAllocator(record=True)`, then
`snapshot_dict`), so every trace is one PyTorch could have recorded; each allocation's stack names one site of
/home/u/model.py. Sizes are whole MiB where the allocator's rounding must not blur the figure: a request of
1 MiB or less is served from a 2 MiB small-pool segment, one under 10 MiB from a 20 MiB segment, a larger one
from a segment of its size rounded up to 2 MiB.
"""
from __future__ import annotations

import math
import pickle

import numpy as np
import pytest

from fragviz.allocator.config import parse_alloc_conf
from fragviz.allocator.sim import DeviceAllocator
from fragviz.allocator.state import snapshot_dict
from fragviz.model import Frame
from fragviz.predict import PredictionRefused, fit_search, plan, predict, recorded_workload, run_at, traced_device
from fragviz.predict.fitting import MAX_FIT
from fragviz.predict.laws import (AFFINE, CLAMPED, CONSTANT, LINEAR, MAX_EXPONENT, POLYNOMIAL, POWER, QUADRATIC,
                                 fit_laws)
from fragviz.predict.match import align
from fragviz.predict.text import fit_text, prediction_text
from fragviz.predict.workload import BEFORE_TRACE
from fragviz.replay.analysis import analyze
from fragviz.snapshot import load_snapshot_bytes
from tests.support.helpers import KiB, MiB, block, ev, frames, segment, snapshot

DEFAULT = parse_alloc_conf("")
RECORDED = [(None, DEFAULT)]  # what predict's CLI passes without --alloc-conf

# -- recordings of small programs ------------------------------------------------------------------------------

SITES = {"weights": 60, "attn": 20, "mlp": 30, "loss": 40, "extra": 50, "act": 70}  # name: line in model.py
FRAMES = tuple(Frame("/home/u/model.py", line, name) for name, line in SITES.items()) + (
    Frame("/home/u/train.py", 7, "main"),)
STACKS = tuple((i, len(SITES)) for i in range(len(SITES)))  # each site called from train.py's main
STACK = {name: i for i, name in enumerate(SITES)}


def site(name: str) -> str:
    """A site as fragviz names it."""
    return f"/home/u/model.py:{SITES[name]} {name}"


class Program:
    """A program run on the allocator model, its memory history on from the start (or from `start_trace`)."""

    def __init__(self, capacity: int | None = None) -> None:
        self.a = DeviceAllocator(DEFAULT, capacity, record=True)

    def alloc(self, name: str, nbytes: int):
        return self.a.malloc(nbytes, 0, STACK[name])

    def free(self, b) -> None:
        self.a.free(b)

    def start_trace(self) -> None:
        """The history switched on now: what is live so far is live before the trace began."""
        self.a.trace.clear()

    def snapshot(self) -> dict:
        return snapshot_dict([self.a], FRAMES, STACKS, {"origin": "test"})


def analysed(data: dict, name: str):
    return analyze(load_snapshot_bytes(pickle.dumps(data), name))


def doubling(k: int, extra: int = 0) -> dict:
    """Weights (8 MiB, constant), two activations (k and 2k MiB, linear), a loss of k² × 64 KiB (quadratic); with
    `extra`, an allocation of that many bytes only this run makes, live to the end."""
    p = Program()
    w = p.alloc("weights", 8 * MiB)
    e = p.alloc("extra", extra) if extra else None
    x = p.alloc("attn", k * MiB)
    y = p.alloc("mlp", 2 * k * MiB)
    p.free(x)
    z = p.alloc("loss", k * k * 64 * KiB)
    p.free(y)
    p.free(z)
    p.free(w)
    if e is not None:
        p.free(e)
    return p.snapshot()


def workload(data: dict, name: str):
    return recorded_workload(analysed(data, name), 0)


@pytest.fixture(scope="module")
def doubled():
    """The doubling program recorded at 4 and 8 (the raw snapshots, and their workloads)."""
    raw = {k: doubling(k) for k in (4, 8)}
    return raw, [workload(raw[k], f"doubling_{k}.pickle") for k in (4, 8)]


# -- laws --------------------------------------------------------------------------------------------------------

def test_each_law_is_read_off_exact_sizes_and_carried_from_the_nearest_recording():
    laws = fit_laws([2, 4], np.array([[7, 7], [100, 200], [100, 400], [100, 300]]))
    assert laws.law.tolist() == [CONSTANT, LINEAR, QUADRATIC, POWER]
    assert laws.exponent[:3].tolist() == [0, 1, 2]
    assert laws.exponent[3] == pytest.approx(math.log2(3))  # 100 → 300 when the knob doubles: 2 ** log2(3)
    assert laws.at(8).tolist() == [7, 400, 1600, 900]  # from the recording at 4: ×1, ×2, ×4, ×3
    assert laws.at(1).tolist() == [7, 50, 25, round(100 / 3)]  # down from the recording at 2
    # 3 is nearer 4 than 2 (by ratio): 200 × 3/4, 400 × (3/4)², 300 × (3/4) ** log2(3)
    assert laws.at(3).tolist() == [7, 150, 225, round(300 * 0.75 ** math.log2(3))]


def test_sizes_within_one_percent_follow_a_law_and_a_byte_more_does_not():
    laws = fit_laws([1, 2], np.array([[1000, 1010], [1000, 1011], [1000, 2020], [1000, 2021]]))
    assert laws.law.tolist() == [CONSTANT, POWER, LINEAR, POWER]
    assert laws.exponent[1] == pytest.approx(math.log2(1.011))
    assert laws.exponent[3] == pytest.approx(math.log2(2.021))
    assert laws.at(4).tolist()[0] == 1010  # constant: the nearest recording's size
    assert laws.at(4).tolist()[2] == 4040  # linear from the nearest recording (2020 at 2), not from the first


def test_three_recordings_fit_a_line_or_the_parabola_through_them():
    knobs = [1, 2, 4]
    laws = fit_laws(knobs, np.array([
        [5, 10, 20],  # proportional: linear, exponent 1
        [110, 120, 140],  # 100 + 10 S: a line, not proportional
        [110, 140, 260],  # 100 + 10 S²: neither a line nor a power
        [100, 200, 500],  # the parabola through the three: 100/3 + 50 S + 50/3 S²
        [100, 300, 900],  # S ** log2(3), on all three
    ]))
    assert laws.law.tolist() == [LINEAR, AFFINE, POLYNOMIAL, POLYNOMIAL, POWER]
    assert laws.exponent[0] == 1 and np.isnan(laws.exponent[1:4]).all()
    assert laws.exponent[4] == pytest.approx(math.log2(3))
    assert laws.at(8).tolist() == [40, 180, 740, 1500, 2700]
    assert laws.at(3).tolist() == [15, 130, 190, 333, round(300 * 1.5 ** math.log2(3))]


def test_a_fitted_power_is_held_within_the_limit_and_a_size_never_below_one_byte():
    laws = fit_laws([1, 2], np.array([[1, 32], [100, 50]]))  # 2 ** 5 when the knob doubles; then halving
    assert laws.law.tolist() == [POWER, POWER]
    assert laws.exponent.tolist() == pytest.approx([MAX_EXPONENT, -1.0])
    assert laws.at(4).tolist() == [32 * 2 ** 4, 25]
    assert laws.at(1000).tolist()[1] == 1  # 0.1 bytes: one


def test_a_size_far_beyond_the_recordings_stays_a_huge_positive_size():
    laws = fit_laws([1, 2], np.array([[10 ** 8, 2 * 10 ** 8], [5, 5]]))
    at = laws.at(1e15)  # 10 ** 23 bytes: past int64, which must not wrap to a negative (or tiny) request
    assert at[0] > 10 ** 18 and at[1] == 5


# -- matching ----------------------------------------------------------------------------------------------------

def pairs(a: str, b: str, give_up_after: int | None = None) -> list[tuple[int, int]]:
    return [tuple(p) for p in align(list(a), list(b), give_up_after).tolist()]


def test_identical_sequences_match_one_to_one():
    assert pairs("ABCDEFG", "ABCDEFG") == [(i, i) for i in range(7)]
    assert align([], ["A"]).shape == (0, 2)


@pytest.mark.parametrize("a,b", [("ABCDEFGH", "ABXCDEFGH"), ("ABCDEFGH", "ABXYZCDEFGH")])
def test_an_insertion_on_either_side_is_skipped(a, b):
    extra = len(b) - len(a)
    expected = [(0, 0), (1, 1)] + [(i, i + extra) for i in range(2, 8)]
    assert pairs(a, b) == expected
    assert pairs(b, a) == [(j, i) for i, j in expected]


def test_a_substitution_is_skipped_on_both_sides():
    assert pairs("ABCDEFG", "ABXDEFG") == [(0, 0), (1, 1)] + [(i, i) for i in range(3, 7)]


def test_back_in_step_needs_four_in_a_row_and_fewer_at_the_end():
    # C agrees alone (then D meets Q): the sequences are back in step at D, four in a row
    assert pairs("ABCDEFGH", "ABZCQDEFGH") == [(0, 0), (1, 1)] + [(i, i + 2) for i in range(3, 8)]
    assert pairs("ABCX", "ABCYX") == [(0, 0), (1, 1), (2, 2), (3, 4)]  # one left on each side: one suffices


def test_give_up_after_stops_the_match_once_that_many_went_unmatched():
    # four unrelated allocations on each side, then the same four: eight skipped to get back in step
    assert pairs("PQRSABCD", "WXYZABCD") == [(4, 4), (5, 5), (6, 6), (7, 7)]
    assert pairs("PQRSABCD", "WXYZABCD", give_up_after=8) == [(4, 4), (5, 5), (6, 6), (7, 7)]
    assert pairs("PQRSABCD", "WXYZABCD", give_up_after=7) == []
    assert pairs("ABCD", "WXYZ") == []  # nothing in common


# -- a recording read as a workload -------------------------------------------------------------------------------

def test_a_workload_holds_the_program_s_requests_sizes_and_sites(doubled):
    _, (w4, w8) = doubled
    assert w8.sizes.tolist() == [8 * MiB, 8 * MiB, 16 * MiB, 4 * MiB]
    assert w8.sites == [site("weights"), site("attn"), site("mlp"), site("loss")]
    assert w8.symbols[1] == (("model.py", 20, "attn"), ("train.py", 7, "main"))  # no directories
    assert [w8.ops[i].kind for i in w8.alloc_at.tolist()] == ["alloc"] * 4
    assert [op.kind for op in w8.ops].count("free") == 4
    assert w4.symbols == w8.symbols and w4.sizes.tolist() == [8 * MiB, 4 * MiB, 8 * MiB, 1 * MiB]


def test_a_recording_that_ran_out_of_memory_is_refused():
    p = Program(capacity=30 * MiB)
    p.alloc("weights", 12 * MiB)  # a 12 MiB segment
    assert p.alloc("attn", 20 * MiB) is None  # 12 + 20 > 30: the trace records the OOM, event 2
    data = p.snapshot()
    assert [e["action"] for e in data["device_traces"][0]] == ["segment_alloc", "alloc", "oom"]
    with pytest.raises(PredictionRefused) as refused:
        workload(data, "ooms.pickle")
    assert str(refused.value) == ("ooms.pickle: the run ran out of memory at event 2, so the recording holds only "
                                  "part of the program: record a run that completes")


def test_a_device_without_a_trace_or_absent_is_refused():
    S = 0x7F00_0000_0000
    data = snapshot([segment(S, [block(S, 2 * MiB, stack=frames("forward"))])], [])
    analysis = analysed(data, "notrace.pickle")
    with pytest.raises(PredictionRefused) as refused:
        recorded_workload(analysis, 0)
    assert str(refused.value).startswith("notrace.pickle: device 0 has no trace (memory history was off")
    with pytest.raises(PredictionRefused) as absent:
        recorded_workload(analysis, 3)
    assert str(absent.value) == "notrace.pickle: no device 3 (it has 0)"


def test_the_traced_device_is_chosen_unless_one_is_asked_for():
    S, T = 0x7F00_0000_0000, 0x7E00_0000_0000
    data = snapshot([segment(S, [block(S, 2 * MiB)]), segment(T, [block(T, 2 * MiB)], device=1)],
                    [], [ev("alloc", T, 2 * MiB)])
    analysis = analysed(data, "two.pickle")
    assert traced_device(analysis, None) == 1
    assert traced_device(analysis, 0) == 0


def pre_trace(k: int) -> dict:
    """Weights (12 MiB) and a cache (4k MiB, a segment of its own) made before the history was switched on, then
    an activation of k MiB, freed."""
    p = Program()
    p.alloc("weights", 12 * MiB)
    p.alloc("extra", 4 * k * MiB)
    p.start_trace()
    x = p.alloc("act", k * MiB)
    p.free(x)
    return p.snapshot()


def test_blocks_live_before_the_trace_open_the_workload_and_follow_their_laws():
    w2, w4 = (workload(pre_trace(k), f"pre_{k}.pickle") for k in (2, 4))
    before = [op for op in w4.ops if op.kind == "alloc" and op.event == 0]
    assert sorted(op.size for op in before) == [12 * MiB, 16 * MiB]
    assert w4.alloc_at.tolist()[:2] == [0, 1]  # the workload opens with them
    assert sorted(w4.sites[:2]) == sorted(f"{BEFORE_TRACE} {site(n)}" for n in ("weights", "extra"))
    assert w4.sites[2] == site("act")
    assert w4.symbols[0][0] == BEFORE_TRACE  # never matched with an allocation of the trace
    p = plan([w2, w4], [2, 4])
    assert p.unmatched.allocations == 0
    run = predict(p, 16, RECORDED, None).runs[0]
    assert run.peak_requested_bytes == (12 + 4 * 16 + 16) * MiB  # weights, the cache at 16, the activation


# -- plan and predict --------------------------------------------------------------------------------------------

def test_a_program_whose_allocations_double_is_predicted_at_four_times_the_size(doubled):
    _, workloads = doubled
    p = plan(workloads, [4, 8], 32)
    assert p.template == 1 and p.matched.all()
    d = predict(p, 32, RECORDED, None).as_dict()
    # at 32: weights 8, attention 32, MLP 64 MiB; attention freed, then the loss: 32² × 64 KiB = 64 MiB
    assert d["peak_requested_bytes"] == d["peak_allocated_bytes"] == (8 + 64 + 64) * MiB  # over 8 + 32 + 64
    # weights in a 20 MiB segment (12 MiB free), then segments of 32, 64 and 64 MiB (the loss fits no free block)
    assert d["peak_reserved_bytes"] == (20 + 32 + 64 + 64) * MiB
    assert d["fragmentation"] == pytest.approx(12 / 180)  # the 12 MiB beside the weights cannot be released
    assert d["oom"] is None  # no device size given
    assert d["law_counts"] == {CONSTANT: 1, LINEAR: 2, QUADRATIC: 1, POWER: 0}
    assert (d["matched_allocations"], d["template_allocations"]) == (4, 4)
    assert d["laws"][site("loss")] == {"law": QUADRATIC, "allocations": 1, "by_law": {QUADRATIC: 1},
                                       "recorded_bytes": {4: 1 * MiB, 8: 4 * MiB}, "predicted_bytes": 64 * MiB}
    assert list(d["laws"]) == [site(n) for n in ("mlp", "loss", "attn", "weights")]  # most predicted bytes first
    assert (d["knob"], d["sizes"], d["to"], d["device"]) == ("size", [4, 8], 32, 0)
    assert d["sources"] == ["doubling_4.pickle", "doubling_8.pickle"]
    assert d["unmatched"] == {"allocations": 0, "bytes": 0, "share": 0.0, "sites": []}
    assert set(d) == {"peak_requested_bytes", "peak_allocated_bytes", "peak_reserved_bytes", "fragmentation", "oom",
                      "laws", "knob", "sizes", "to", "sources", "device", "matched_allocations",
                      "template_allocations", "law_counts", "unmatched", "runs", "peak_requested_range",
                      "peak_reserved_range", "warnings", "ambiguous", "leave_one_out"}
    # every size a pure power of the knob: one law each, so the range is the point and nothing is in doubt
    assert d["peak_requested_range"] == [136 * MiB, 136 * MiB] and d["peak_reserved_range"] == [180 * MiB, 180 * MiB]
    assert d["warnings"] == [] and d["ambiguous"] == {"allocations": 0, "share": 0.0, "sites": []}
    assert d["leave_one_out"] is None  # two recordings: nothing to leave out
    (run,) = d["runs"]
    assert run == {"alloc_conf": None, "device_memory_bytes": None, "peak_requested_bytes": 136 * MiB,
                   "peak_allocated_bytes": 136 * MiB, "peak_reserved_bytes": 180 * MiB,
                   "fragmentation": d["fragmentation"], "oom": None, "oom_count": 0,
                   "peak_requested_range": [136 * MiB, 136 * MiB], "peak_reserved_range": [180 * MiB, 180 * MiB]}


def test_on_a_device_the_prediction_fits_or_says_where_it_runs_out_of_memory(doubled):
    raw, workloads = doubled
    p = plan(workloads, [4, 8], 32)
    fits = predict(p, 32, RECORDED, 150 * MiB)
    # the loss needs a fourth segment: 116 + 64 > 150, so the free 32 MiB segment is released first: 148 MiB
    assert fits.as_dict()["oom"] is False and fits.runs[0].fits is True
    assert fits.runs[0].peak_reserved_bytes == 148 * MiB
    short = predict(p, 32, RECORDED, 140 * MiB).as_dict()
    # 84 + 64 > 140 even then: the loss's request fails, with the weights' segment and the MLP's reserved
    trace = raw[8]["device_traces"][0]  # the template's: the recording at 8
    (loss_event,) = [i for i, e in enumerate(trace) if e["action"] == "alloc" and e["frames"][0]["name"] == "loss"]
    assert short["oom"] == {"event": loss_event, "site": site("loss"), "requested_bytes": 64 * MiB,
                            "reserved_bytes": (20 + 64) * MiB, "largest_free_block": 12 * MiB,
                            "device_memory_bytes": 140 * MiB}
    assert short["peak_requested_bytes"] == (8 + 32 + 64) * MiB  # the loss never allocated
    assert short["runs"][0]["oom_count"] == 1


def test_the_template_is_the_recording_nearest_the_target(doubled):
    _, (w4, w8) = doubled
    w2 = workload(doubling(2), "doubling_2.pickle")
    assert plan([w4, w8], [4, 8]).template == 1  # no target: the largest
    assert plan([w4, w8], [4, 8], 5).template == 0
    assert plan([w2, w8], [2, 8], 4).template == 1  # as near both (by ratio): the larger
    assert plan([w2, w4, w8], [2, 4, 8], 3).template == 1


def test_an_allocation_only_one_recording_makes_is_reported_and_keeps_its_size():
    w4, w8 = workload(doubling(4), "d4.pickle"), workload(doubling(8, extra=1 * MiB), "d8.pickle")
    p = plan([w4, w8], [4, 8])
    total = (8 + 4 + 8 + 1) + (8 + 8 + 16 + 4 + 1)  # MiB allocated by both recordings
    assert p.unmatched.as_dict() == {"allocations": 1, "bytes": 1 * MiB, "share": 1 / total,
                                     "sites": [{"site": site("extra"), "size": 8, "allocations": 1,
                                                "bytes": 1 * MiB}]}
    prediction = predict(p, 32, RECORDED, None)
    assert (prediction.matched_allocations, prediction.template_allocations) == (4, 5)
    assert prediction.runs[0].peak_requested_bytes == (136 + 1) * MiB  # live throughout, at its recorded size
    assert site("extra") not in prediction.as_dict()["laws"]
    text = prediction_text(prediction)
    assert (f"  unmatched: 1 allocations, 1.00 MiB ({1 / total:.1%} of the recorded bytes); those of the run "
            "predicted from keep their recorded size") in text.splitlines()
    assert f"    1.00 MiB in 1 at {site('extra')} (only in the run at 8)" in text.splitlines()


def test_more_unmatched_bytes_than_allowed_is_refused_with_the_share_and_the_site():
    w4, w8 = workload(doubling(4), "d4.pickle"), workload(doubling(8, extra=10 * MiB), "d8.pickle")
    total = (8 + 4 + 8 + 1) + (8 + 8 + 16 + 4 + 10)
    with pytest.raises(PredictionRefused) as refused:
        plan([w4, w8], [4, 8])
    assert str(refused.value) == (
        f"d4.pickle, d8.pickle: cannot predict: {10 / total:.1%} of the recorded bytes (10.00 MiB in 1 allocations) "
        "do not match between the recordings, more than the 10% allowed: they do not look like one program at two "
        f"sizes (largest: 10.00 MiB at {site('extra')} (size 8))")
    assert plan([w4, w8], [4, 8], max_unmatched=0.2).unmatched.share == pytest.approx(10 / total)


def test_three_recordings_predict_an_affine_allocation_on_its_line():
    def affine(k: int) -> dict:
        p = Program()
        w = p.alloc("weights", 8 * MiB)
        x = p.alloc("act", (2 + k) * MiB)  # a fixed 2 MiB plus k MiB
        p.free(x)
        p.free(w)
        return p.snapshot()

    workloads = [workload(affine(k), f"a{k}.pickle") for k in (2, 4, 8)]
    p = plan(workloads, [2, 4, 8], 16)
    assert p.laws.law.tolist() == [CONSTANT, AFFINE] and np.isnan(p.laws.exponent[1])
    run = predict(p, 16, RECORDED, None).runs[0]
    assert run.peak_requested_bytes == (8 + 18) * MiB  # not (8 + 10 × 2) from the recording at 8 doubled


def test_a_prediction_reads_as_text(doubled):
    _, workloads = doubled
    prediction = predict(plan(workloads, [4, 8]), 32, RECORDED, 140 * MiB, knob="batch")
    lines = prediction_text(prediction).splitlines()
    assert lines[0] == ("predicted at batch 32 from the runs at batch 4, 8 (doubling_4.pickle, doubling_8.pickle), "
                        "device 0")
    assert lines[1] == "  matched 4 of 4 allocations; laws: 1 constant, 2 linear, 1 quadratic"
    assert lines[2] == "  every allocation matched between the recordings"
    assert lines[3].startswith("  under the recorded settings: peak requested 104.00 MiB (up to the OOM; without the "
                               "device's limit: 136.00 MiB), ")
    assert lines[4].startswith(f"    runs out of memory on 140.00 MiB: 64.00 MiB requested at {site('loss')} (event ")
    assert lines[6] == f"    {site('mlp')}: linear (8.00 MiB → 16.00 MiB → 64.00 MiB)"


# -- the largest size that fits ----------------------------------------------------------------------------------

def weights_and_activation(k: int) -> dict:
    """Weights of 10 MiB (a segment of exactly 10 MiB) and one activation of k MiB, live together."""
    p = Program()
    w = p.alloc("weights", 10 * MiB)
    x = p.alloc("act", k * MiB)
    p.free(x)
    p.free(w)
    return p.snapshot()


@pytest.fixture(scope="module")
def linear_plan():
    return plan([workload(weights_and_activation(k), f"wa_{k}.pickle") for k in (2, 4)], [2, 4])


def test_the_largest_size_that_fits_minds_the_segment_rounding(linear_plan):
    # 10 MiB + k MiB rounded up to 2 MiB on 111 MiB: 100 fits (110 MiB); 101 needs a 102 MiB segment (112 MiB)
    answer = fit_search(linear_plan, None, DEFAULT, 111 * MiB)
    assert (answer.largest, answer.first_failing) == (100, 101)
    assert answer.run.peak_reserved_bytes == 110 * MiB and answer.run.oom is None
    oom = answer.failing_run.oom
    assert (oom.site, oom.requested_bytes, oom.reserved_bytes) == (site("act"), 101 * MiB, 10 * MiB)
    d = answer.as_dict()
    assert set(d) == {"alloc_conf", "device_memory_bytes", "largest_fitting", "first_failing", "at_largest",
                      "at_first_failing", "largest_fitting_point", "first_failing_point"}
    assert (d["largest_fitting_point"], d["first_failing_point"]) == (100, 101)  # exact laws: safe is the point
    assert (d["largest_fitting"], d["at_largest"]["oom"], d["at_first_failing"]["oom"]["requested_bytes"]) == (
        100, False, 101 * MiB)
    assert fit_text("batch", [answer]) == (
        "under the recorded settings: the largest batch that fits 111.00 MiB is 100 (peak reserved 110.00 MiB); at "
        f"101 it runs out of memory: 101.00 MiB at {site('act')}")


def test_every_setting_asked_for_runs_the_same_requests(linear_plan):
    conf = "roundup_power2_divisions:2"  # two steps per power of two: 10 MiB → 12, 97 MiB → 128
    prediction = predict(linear_plan, 97, [("", DEFAULT), (conf, parse_alloc_conf(conf))], None)
    runs = prediction.runs
    assert [r.alloc_conf for r in runs] == ["", conf]
    assert [r.peak_requested_bytes for r in runs] == [107 * MiB, 107 * MiB]
    assert [r.peak_reserved_bytes for r in runs] == [(10 + 98) * MiB, (12 + 128) * MiB]
    d = prediction.as_dict()
    assert d["peak_reserved_bytes"] == 108 * MiB and [r["alloc_conf"] for r in d["runs"]] == ["", conf]


def test_the_largest_size_that_fits_under_another_setting(linear_plan):
    # two divisions per power of two: the weights take 12 MiB; 65 to 96 MiB round to 96 (108 MiB), 97 to 128
    conf = "roundup_power2_divisions:2"
    answer = fit_search(linear_plan, conf, parse_alloc_conf(conf), 111 * MiB)
    assert (answer.alloc_conf, answer.largest, answer.first_failing) == (conf, 96, 97)
    assert answer.run.peak_reserved_bytes == 108 * MiB


def test_below_the_recordings_a_small_pool_segment_fits_where_a_20_mib_one_does_not(linear_plan):
    # on 13 MiB: 1 MiB comes from a 2 MiB small-pool segment (12 MiB); 2 MiB needs a 20 MiB segment
    answer = fit_search(linear_plan, None, DEFAULT, 13 * MiB)
    assert (answer.largest, answer.first_failing) == (1, 2)
    assert answer.run.peak_reserved_bytes == 12 * MiB


def test_when_nothing_fits_or_everything_fits(linear_plan):
    none = fit_search(linear_plan, None, DEFAULT, 8 * MiB)  # the weights alone are 10 MiB
    assert (none.largest, none.first_failing, none.run) == (None, 1, None)
    assert none.failing_run.oom.site == site("weights")
    assert fit_text("size", [none]) == "under the recorded settings: not even size 1 fits 8.00 MiB"
    every = fit_search(linear_plan, None, DEFAULT, 1 << 50)  # 10 MiB + MAX_FIT MiB is 16 TiB
    assert (every.largest, every.first_failing, every.failing_run) == (MAX_FIT, None, None)
    assert fit_text("size", [every]) == f"under the recorded settings: every size up to {MAX_FIT} fits 1048576.00 GiB"


def test_one_recording_given_at_two_sizes_is_refused():
    same = [workload(weights_and_activation(3), f"c{k}.pickle") for k in (2, 4)]  # one trace, two names
    with pytest.raises(PredictionRefused) as refused:
        plan(same, [2, 4])
    assert str(refused.value) == ("c2.pickle, c4.pickle: cannot predict: the recordings given at sizes 2 and 4 are "
                                  "one recording (the same trace, event for event): record the program at two sizes "
                                  "of the knob")


def test_an_oom_at_a_block_live_before_the_trace_names_its_site():
    def model(k: int) -> dict:
        p = Program()
        p.alloc("extra", 12 * k * MiB)
        p.alloc("weights", 12 * MiB)
        p.start_trace()
        x = p.alloc("act", k * MiB)
        p.free(x)
        return p.snapshot()

    w1, w2 = (workload(model(k), f"m{k}.pickle") for k in (1, 2))
    # both open the workload (in site order: nothing records the order they were made in)
    assert set(w2.sites[:2]) == {f"{BEFORE_TRACE} {site('weights')}", f"{BEFORE_TRACE} {site('extra')}"}
    run = predict(plan([w1, w2], [1, 2]), 4, RECORDED, 40 * MiB).runs[0]
    assert run.oom.site == f"{BEFORE_TRACE} {site('extra')}"  # 48 MiB after the weights' 12 MiB on 40 MiB
    assert run.oom.requested_bytes == 48 * MiB


def test_a_few_tiny_extra_allocations_leave_the_rest_matched():
    """The match stops early only where half the allocations went unmatched: the limit is on bytes."""
    def program(k: int, extras: int) -> dict:
        p = Program()
        for _ in range(extras):  # three 512-byte allocations only the bigger run makes, before everything else
            p.alloc("extra", 512)
        w = p.alloc("weights", 8 * MiB)
        x = p.alloc("attn", k * MiB)
        p.free(x)
        p.free(w)
        return p.snapshot()

    w4, w8 = workload(program(4, 0), "t4.pickle"), workload(program(8, 3), "t8.pickle")
    p = plan([w4, w8], [4, 8])
    assert (p.unmatched.allocations, p.unmatched.bytes) == (3, 3 * 512)
    assert p.matched.tolist() == [False, False, False, True, True]


def test_a_block_pending_free_when_the_trace_began_is_not_carried_into_the_prediction():
    def program(k: int) -> dict:
        p = Program()
        w = p.alloc("weights", 8 * MiB)
        gone = p.alloc("extra", 12 * k * MiB)
        p.a.free(gone, pending=True)  # freed by the program, waiting on another stream
        p.start_trace()
        x = p.alloc("act", k * MiB)
        p.free(x)
        p.free(w)
        return p.snapshot()

    w1, w2 = workload(program(1), "p1.pickle"), workload(program(2), "p2.pickle")
    assert w2.sites == [f"{BEFORE_TRACE} {site('weights')}", site("act")]
    run = predict(plan([w1, w2], [1, 2]), 4, RECORDED, None).runs[0]
    assert run.peak_requested_bytes == (8 + 4) * MiB


def test_the_match_is_bounded_on_sequences_that_never_agree(monkeypatch):
    """Unrelated programs: every place tried costs one check, and the checks are bounded by the input's length."""
    import random

    from fragviz.predict import match

    tried = []
    real = match._agree
    monkeypatch.setattr(match, "_agree", lambda *args: tried.append(1) or real(*args))
    r = random.Random(1)
    a, b = [r.randrange(100) for _ in range(5000)], [r.randrange(100) for _ in range(5000)]
    pairs = match.align(a, b)
    assert len(tried) <= match.WORK_PER_ALLOCATION * (len(a) + len(b))
    assert len(pairs) < 100  # nearly nothing matches: a prediction would be refused


# -- how sure: the laws the recordings allow, and their spread -----------------------------------------------------

def test_two_recordings_of_a_size_off_every_pure_law_allow_three_laws_and_the_range_spans_them():
    # 81 and 113 units at 32 and 64: (seq + 49), a line not through zero; two points fit any two-parameter law
    laws = fit_laws([32, 64], np.array([[81.0, 113.0], [7.0, 7.0]]))
    assert laws.law.tolist() == [POWER, CONSTANT] and laws.ambiguous.tolist() == [True, False]
    low, high = laws.bounds_at(256)
    power = 113 * 4 ** math.log2(113 / 81)  # through both, carried from 64
    affine = 81 + (113 - 81) / 32 * (256 - 32)
    parabola = 81 + (113 - 81) / (64 ** 2 - 32 ** 2) * (256 ** 2 - 32 ** 2)  # a + c·S²
    assert (low[0], high[0]) == (round(min(power, affine, parabola)), round(max(power, affine, parabola)))
    assert low[0] <= 305 <= high[0]  # the truth, seq + 49 at 256
    assert laws.at(256)[0] == round(power) and (low[1], high[1]) == (7, 7)


def test_three_recordings_choose_the_law_that_holds_on_all_and_its_range_is_its_point():
    # seq + 49 at 32, 64 and 128: the affine line holds on the three; (seq + 49)²: the polynomial
    laws = fit_laws([32, 64, 128], np.array([[81.0, 113.0, 177.0], [81.0 ** 2, 113.0 ** 2, 177.0 ** 2]]))
    assert laws.law.tolist() == [AFFINE, POLYNOMIAL]
    assert laws.at(256).tolist() == [305, 305 ** 2]
    low, high = laws.bounds_at(256)
    assert (low[0], high[0]) == (305, 305)  # the power does not hold on three, so nothing else is allowed
    assert low[1] <= 305 ** 2 <= high[1]  # an affine power a + b·S^p also goes through three points


def test_a_size_that_grew_then_stayed_is_clamped_and_a_parabola_that_turns_back_is_not_allowed():
    laws = fit_laws([4, 8, 16], np.array([[100.0, 200.0, 200.0], [188416.0, 589824.0, 655360.0]]))
    assert laws.law[0] == CLAMPED and laws.at(64)[0] == 200
    assert laws.law[1] != POLYNOMIAL  # 589824 → 655360 bends down: the parabola through them falls below zero
    assert laws.bounds_at(32)[0][1] >= 1


def test_a_site_whose_exponents_scatter_is_data_dependent_and_predicted_by_its_median():
    # one site, five allocations whose sizes grow by 1.5 to 6 times as the knob doubles (padding to the longest)
    sizes = np.array([[100.0, 150.0], [100.0, 250.0], [100.0, 300.0], [100.0, 450.0], [100.0, 600.0]])
    laws = fit_laws([4, 8], sizes, groups=[0] * 5)
    exponents = np.log2(sizes[:, 1] / sizes[:, 0])
    assert laws.spread is not None and not np.isnan(laws.spread[0]).any()
    assert laws.exponent.tolist() == pytest.approx([float(np.median(exponents))] * 5)
    low, high = laws.bounds_at(16)
    assert high.tolist() == [round(600 * 2 ** exponents.max())] * 5  # the site's largest size, at its fastest
    assert low.tolist() == [round(s * 2 ** min(exponents.min(), 1.0)) for s in sizes[:, 1]]
    # the same sizes at five sites: each is one allocation, no scatter to read, so a law per allocation
    assert fit_laws([4, 8], sizes, groups=range(5)).spread is None


def test_the_safe_fit_is_never_above_the_point_and_is_checked_at_the_high_end(tmp_path):
    def model(k: int) -> dict:
        p = Program()
        w = p.alloc("weights", 10 * MiB)
        x = p.alloc("act", (k + 49) * MiB)  # affine in k: two recordings cannot tell it from a power
        p.free(x)
        p.free(w)
        return p.snapshot()

    fitted = plan([workload(model(k), f"p{k}.pickle") for k in (32, 64)], [32, 64])
    answer = fit_search(fitted, None, DEFAULT, 512 * MiB)
    assert answer.point.largest is not None and answer.largest is not None
    assert answer.largest <= answer.point.largest
    # the safe answer fits at the high end of every law, and one more does not
    high = fitted.bounds_at(answer.largest + 1)[1]
    assert run_at(fitted, answer.largest, None, DEFAULT, 512 * MiB, fitted.bounds_at(answer.largest)[1]).oom is None
    assert run_at(fitted, answer.largest + 1, None, DEFAULT, 512 * MiB, high).oom is not None
    # the truth, 10 + k + 49 MiB in 2 MiB-rounded segments of 512 MiB: k = 451 fits; the safe answer is below it
    assert answer.largest <= 451
    text = fit_text("seq", [answer])
    assert f"under every law the recordings allow is {answer.largest}" in text
    assert f"under the chosen laws it is {answer.point.largest}" in text
