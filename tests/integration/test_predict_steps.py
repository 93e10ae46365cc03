"""`fragviz predict` on programs whose number of steps follows the knob (issue 35 item 4): kv_cat (a KV cache grown
each token, knob: new tokens) and epoch (N / batch steps, knob: batch), recorded at four values
(tests/data/predict_shapes); the fourth predicted from the first two and from the first three. The recorded peaks
lie within the predicted ranges; from three recordings the point is within 5 % (peak requested) and 10 % (peak
reserved); the warnings say the count of steps was extrapolated."""
from __future__ import annotations

import pytest

from fragviz.replay.analysis import trace_totals
from fragviz.replay.files import analyze_file
from tests.support.predict_shapes import BY_NAME, predict


@pytest.mark.parametrize("count", (2, 3), ids=("two", "three"))
@pytest.mark.parametrize("name", ("kv_cat", "epoch"))
def test_a_count_of_steps_that_follows_the_knob_is_predicted(name, count):
    shape = BY_NAME[name]
    totals = trace_totals(analyze_file(shape.path(shape.values[3]), workers=1).snapshot, 0)
    got = predict(shape, count)
    assert got.refusal is None and got.json is not None, got.refusal
    j = got.json
    requested, reserved = j["peak_requested_bytes"], j["peak_reserved_bytes"]
    errors = ((requested - totals.peak_requested) / totals.peak_requested,
              (reserved - totals.peak_reserved) / totals.peak_reserved)
    print(f"{name} from {count}: peak requested {errors[0]:+.1%}, peak reserved {errors[1]:+.1%}")
    low, high = j["peak_requested_range"]
    assert low <= totals.peak_requested <= high, (totals.peak_requested, low, high)
    low, high = j["peak_reserved_range"]
    assert low <= totals.peak_reserved <= high, (totals.peak_reserved, low, high)
    assert any(w.startswith("the number of steps at") for w in j["warnings"]), j["warnings"]
    if count == 3:
        assert abs(errors[0]) <= 0.05 and abs(errors[1]) <= 0.10, errors


def test_an_oom_in_a_written_step_names_the_program_s_line():
    # 128 tokens on 40 MiB: the run at 128 was recorded with a peak reserved of 64 MiB, so it runs out of memory,
    # in a step the recordings at 16 and 32 never made (they hold 15 and 31 steps of the 127)
    got = predict(BY_NAME["kv_cat"], 2, "--device-memory", "40MiB").json
    assert got is not None and got["oom"]["site"].startswith("tests/predict_shapes/kv_cat.py:")
