"""What holds memory: allocation lifetimes, kinds from stacks, and bands, on cases worked out by hand."""
from __future__ import annotations

import pickle

import numpy as np
import pytest

from fragviz.replay.analysis import analyze
from fragviz.base.errors import UsageError
from fragviz.model import Frame
from fragviz.doctor.report import report_of
from fragviz.snapshot import load_snapshot_bytes
from fragviz.usage.bands import bands_of, by_group, grid_of
from fragviz.usage.kinds import KINDS, compile_rules, current_rules
from fragviz.usage.lifetimes import Lifetimes
from fragviz.usage.stackless import BEFORE_RECORDING, REASON_TEXT
from tests.support.helpers import MiB, block, ev, frames, segment, snapshot

S = 0x7F00_0000_0000


def case() -> dict:
    """A block P allocated before the trace and freed in it; A allocated and freed (requested, then completed);
    B and C allocated and live at the end. States 0..6."""
    final = segment(S, [block(S, 4 * MiB, stack=frames("forward")), block(S + 4 * MiB, 2 * MiB, stack=frames("step")),
                        block(S + 6 * MiB, 14 * MiB, "inactive")])
    trace = [
        ev("alloc", S + 12 * MiB, 1 * MiB, frames=frames("forward")),  # A, event 0
        ev("alloc", S, 4 * MiB, frames=frames("forward")),  # B, event 1
        ev("free_requested", S + 12 * MiB, 1 * MiB),  # A waits on a stream: still live
        ev("free_completed", S + 12 * MiB, 1 * MiB),  # A ends, event 3
        ev("free_completed", S + 8 * MiB, 2 * MiB),  # P (from before the trace) ends, event 4
        ev("alloc", S + 4 * MiB, 2 * MiB, frames=frames("step")),  # C, event 5
    ]
    return snapshot([final], trace)


def lifetimes_of_case():
    analysis = analyze(load_snapshot_bytes(pickle.dumps(case()), "case.pickle"))
    return analysis, analysis.replays[0].lifetimes()


def test_each_allocation_is_live_from_the_state_after_its_alloc_to_the_state_of_its_free_completed():
    _, lt = lifetimes_of_case()
    got = sorted(zip(lt.start.tolist(), lt.end.tolist(), (lt.size // MiB).tolist(), lt.address.tolist()))
    assert got == [(0, 5, 2, S + 8 * MiB),  # P: before the trace, freed by event 4
                   (1, 4, 1, S + 12 * MiB),  # A: alloc at event 0, free_completed at event 3
                   (2, 7, 4, S),  # B: alloc at event 1, live at the end (past the last state, 6)
                   (6, 7, 2, S + 4 * MiB)]  # C: alloc at event 5
    assert lt.states == 7


def test_live_bytes_of_every_state_match_the_replay():
    analysis, lt = lifetimes_of_case()
    expected_mib = [2, 3, 7, 7, 6, 4, 6]  # by hand, from the lifetimes above
    assert (lt.live_bytes(0, 6) // MiB).tolist() == expected_mib
    assert lt.live_bytes(0, 6).tolist() == analysis.replays[0].series["allocated"].tolist()
    assert (lt.live_bytes(2, 4) // MiB).tolist() == [7, 7, 6]


def test_the_report_gives_live_bytes_by_kind_at_the_end_and_at_the_peak():
    analysis, _ = lifetimes_of_case()
    device = report_of(analysis).devices[0]
    assert set(device.kinds) == set(KINDS) and set(device.kinds_at_peak) == set(KINDS)
    # the final state: B (a forward frame: activations) and C (`step`: no rule matches, other)
    assert device.kinds["activations"] == 4 * MiB and device.kinds["other"] == 2 * MiB
    assert sum(device.kinds.values()) == device.allocated_bytes
    # the most requested bytes: states 2 and 3 (P, A, B live: 7 MiB); the first is taken
    assert device.peak_requested_state == 2
    assert device.kinds_at_peak["activations"] == 5 * MiB  # A and B
    # P: a block from before the trace has no stack, and stacks are recorded (the trace's): from before recording
    assert device.kinds_at_peak["no_stack"] == 2 * MiB and device.kinds_at_peak["other"] == 0
    assert device.kind_notes == {"no_stack": REASON_TEXT[BEFORE_RECORDING]}
    assert sum(device.kinds_at_peak.values()) == 7 * MiB


def f(filename: str, name: str) -> Frame:
    return Frame(filename, 1, name)


@pytest.mark.parametrize("stack, kind", [
    ([f("/x/site-packages/torch/optim/adam.py", "_init_group"), f("/home/u/train.py", "train")], "optimizer_state"),
    ([f("??", "torch::autograd::Engine::evaluate_function(...)"), f("/home/u/train.py", "train")], "gradients"),
    ([f("/x/torch/_tensor.py", "backward"), f("/home/u/train.py", "train")], "gradients"),
    ([f("/x/torch/nn/modules/linear.py", "__init__"), f("/home/u/model.py", "__init__")], "parameters"),
    ([f("/x/torch/nn/modules/module.py", "_apply"), f("/x/torch/nn/modules/module.py", "to")], "parameters"),
    ([f("/x/transformers/cache_utils.py", "update"), f("/home/u/model.py", "forward")], "kv_cache"),
    ([f("/x/vllm/worker/cache_engine.py", "_allocate_kv_cache")], "kv_cache"),
    ([f("/home/u/model.py", "attention"), f("/home/u/model.py", "forward"),
      f("/x/torch/nn/modules/module.py", "_call_impl")], "activations"),
    # every forward op passes through VariableType: not a gradient
    ([f("VariableType_2.cpp", "torch::autograd::VariableType::(anonymous namespace)::mm(...)"),
      f("/home/u/model.py", "forward")], "activations"),
    ([f("/home/u/data.py", "load_batch")], "other"),
    ([], "no_stack"),  # never "other": an allocation without a stack is a kind of its own
])
def test_default_kind_rules(stack, kind):
    assert compile_rules().kind_of(stack) == kind


def test_user_rules_come_first_and_bad_rules_are_refused():
    attention = [f("/home/u/model.py", "attention"), f("/home/u/model.py", "forward")]
    assert compile_rules().kind_of(attention) == "activations"
    assert compile_rules({"kv_cache": [r"model\.py:attention$"]}).kind_of(attention) == "kv_cache"
    assert compile_rules({"kv_cache": r"model\.py:attention$"}).kind_of(attention) == "kv_cache"
    with pytest.raises(UsageError, match="unknown kind 'weights'"):
        compile_rules({"weights": ["x"]})
    with pytest.raises(UsageError, match="not a regular expression"):
        compile_rules({"parameters": ["("]})
    with pytest.raises(UsageError, match="list of regular expressions"):
        compile_rules({"parameters": [3]})
    for kind in ("no_stack", "parameters_inferred", "other"):  # no rule can claim what no stack names
        with pytest.raises(UsageError, match=f"unknown kind '{kind}'"):
            compile_rules({kind: ["x"]})


def test_kind_indices_classify_each_frame_once_and_agree_with_kind_of():
    rules = compile_rules()
    pool = [f("/x/torch/optim/adam.py", "step"), f("/home/u/model.py", "forward"),
            f("/x/torch/_tensor.py", "backward"), f("/home/u/train.py", "train")]
    stacks = [(0, 3), (1, 3), (2, 1, 3), (3,), ()]
    got = [KINDS[i] for i in rules.kind_indices(pool, stacks)]
    assert got == [rules.kind_of([pool[i] for i in s]) for s in stacks]
    assert got == ["optimizer_state", "activations", "gradients", "other", "no_stack"]


def test_fragviz_toml_kinds_table(tmp_path, monkeypatch):
    config = tmp_path / "fragviz.toml"
    config.write_text('[kinds]\nkv_cache = ["model\\\\.py:attention$"]\n')
    monkeypatch.setenv("FRAGVIZ_CONFIG", str(config))
    attention = [f("/home/u/model.py", "attention")]
    assert current_rules().kind_of(attention) == "kv_cache"
    config.write_text('[kinds]\nweights = ["x"]\n')
    with pytest.raises(UsageError, match=str(config)):
        current_rules()


def hand_lifetimes() -> Lifetimes:
    """Four allocations over states 0..5 (6 states).

    L: 8 bytes, states 0-5 (longest: bottom); M: 4 bytes, states 1-3; N: 2 bytes, states 2-5; T: 1 byte, state 4.
    """
    cols = {"start": [0, 1, 2, 4], "end": [6, 4, 6, 5], "size": [8, 4, 2, 1], "requested": [8, 4, 2, 1],
            "stack": [0, 1, 2, 3], "address": [0, 100, 200, 300], "stream": [0, 0, 0, 0],
            "start_us": [-1, -1, -1, -1], "end_us": [-1, -1, -1, -1]}
    return Lifetimes.from_columns({k: np.asarray(v) for k, v in cols.items()}, 6)


def test_bands_stack_the_longest_lived_at_the_bottom_in_rectangles_of_constant_offset():
    lt = hand_lifetimes()
    grid = grid_of(lt, 0, 5)
    assert grid.bucket == 1 and grid.states.tolist() == [0, 1, 2, 3, 4, 5]
    assert grid.live.tolist() == [8, 12, 14, 14, 11, 10]
    bands = bands_of(lt, grid, np.zeros(4, np.int64), 1)
    # lifetimes: L 6, N 4, M 3, T 1 states: that order from the bottom
    assert bands.rows.tolist() == [0, 2, 1, 3]
    rects = sorted(zip(bands.rows[bands.run_band].tolist(), bands.run_first.tolist(), bands.run_last.tolist(),
                       bands.run_base.tolist()))
    assert rects == [(0, 0, 6, 0),  # L on the floor throughout
                     (1, 1, 2, 8),  # M over L in state 1, then over L and N (8 + 2) in states 2-3
                     (1, 2, 4, 10),
                     (2, 2, 6, 8),  # N over L
                     (3, 4, 5, 10)]  # T over L and N (M has ended)
    assert bands.folded.sum() == 0 and bands.folded_count == 0


def test_bands_fold_the_smallest_of_each_column_into_their_group():
    lt = hand_lifetimes()
    grid = grid_of(lt, 0, 5)
    group = np.array([0, 0, 1, 1])
    bands = bands_of(lt, grid, group, 2, per_column=2)
    # the two largest live in each state are drawn: L, M, N (N is second largest in states 4 and 5); T is folded
    assert sorted(bands.rows.tolist()) == [0, 1, 2]
    assert bands.folded.tolist() == [[0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 1, 0]]
    assert bands.folded_base[1].tolist()[4] == 10  # over L and N
    assert bands.folded_count == 1


def test_a_coarse_grid_draws_each_bucket_at_its_peak_state():
    lt = hand_lifetimes()
    grid = grid_of(lt, 0, 5, columns=2)  # buckets of 3 states: 0-2 and 3-5
    assert grid.bucket == 3 and grid.edges.tolist() == [0, 3, 6]
    assert grid.states.tolist() == [2, 3]  # live 8, 12, 14 -> state 2; 14, 11, 10 -> state 3
    assert grid.live.tolist() == [14, 14]
    per_group = by_group(lt, grid, np.array([0, 1, 1, 0]), 2)
    assert per_group.tolist() == [[8, 8], [6, 6]]  # L (and T, not live then); M and N
