"""What a simulated recording counted (the tensors placed on CUDA, or every tensor) travels with its summary, and
a growth check between two that counted differently is refused, not judged."""
from __future__ import annotations

import json

import pytest

from fragviz.gate.budgets import budgets_from_text
from fragviz.gate.figures import DeviceFigures, MemorySummary, SummaryError, summary_from_dict
from fragviz.gate.judge import judge


def summary(source: str, placement: str | None, simulated: bool = True, peak: int = 1 << 20) -> MemorySummary:
    device = DeviceFigures(0, 10, peak, peak, 0.0, 5, True, ())
    return MemorySummary(source, (device,), simulated, placement=placement)


def test_a_growth_check_between_recordings_that_counted_different_tensors_cannot_be_judged():
    growth = budgets_from_text(None, None, "5%", None, None, None)
    result = judge(summary("new", "cuda tensors"), summary("old", "every tensor", peak=8 << 20), growth)
    assert result.exit_code == 2 and not result.passed
    assert result.reason == ("new and old do not compare: new counted the tensors the code placed on CUDA, old "
                             "counted every tensor (its code placed none on CUDA); write the baseline again from the "
                             "code as it is now (pytest --memory-update-baseline)")
    same = judge(summary("new", "cuda tensors"), summary("old", "cuda tensors"), growth)
    assert same.passed and "recorded on a CPU by fragviz's simulated CUDA device: new counted the tensors the code " \
                           "placed on CUDA" in same.notes


def test_the_placement_is_written_and_read_back_and_an_older_simulated_summary_counted_every_tensor():
    data = summary("s", "cuda tensors").as_dict()
    assert data["placement"] == "cuda tensors"
    assert summary_from_dict(json.loads(json.dumps(data)), "s.json").placement == "cuda tensors"
    del data["placement"]
    assert summary_from_dict(data, "s.json").placement == "every tensor"
    assert summary_from_dict({**data, "simulated": False}, "s.json").placement is None
    with pytest.raises(SummaryError, match="s.json: placement 'somewhere' is none of cuda tensors, every tensor"):
        summary_from_dict({**data, "placement": "somewhere"}, "s.json")
