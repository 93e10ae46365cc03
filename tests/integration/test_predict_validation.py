"""`fragviz predict` validated on real recordings: the bundled GPT-style workload captured at three batch sizes and
three sequence lengths, in training and in inference (tests/support/predict_runs.py, tests/data/predict); the third
of each series predicted from the first two is within the issue's targets of what was recorded: peak requested
within 5 %, peak reserved within 10 %."""
from __future__ import annotations

import pytest

from fragviz.predict import plan, predict, recorded_workload
from fragviz.replay.analysis import trace_totals
from fragviz.replay.files import analyze_file
from tests.support.predict_runs import SERIES


@pytest.fixture(scope="module", params=SERIES, ids=[s.name for s in SERIES])
def series(request):
    s = request.param
    return s, [analyze_file(p, workers=1) for p in s.paths()]


def test_the_third_run_is_predicted_from_the_first_two_within_the_targets(series):
    s, (small, mid, big) = series
    target = s.values[2]
    fitted = plan([recorded_workload(small, 0), recorded_workload(mid, 0)], s.values[:2], target)
    run = predict(fitted, target, [(None, mid.settings)], None, s.knob).runs[0]
    recorded = trace_totals(big.snapshot, 0)
    assert abs(run.peak_requested_bytes - recorded.peak_requested) <= 0.05 * recorded.peak_requested
    assert abs(run.peak_reserved_bytes - recorded.peak_reserved) <= 0.10 * recorded.peak_reserved
    assert fitted.unmatched.share <= 0.01  # one program at two sizes: (almost) every allocation matched


def test_a_device_smaller_than_the_predicted_peak_runs_out_of_memory_where_the_recording_grew(series):
    s, (small, mid, big) = series
    target = s.values[2]
    fitted = plan([recorded_workload(small, 0), recorded_workload(mid, 0)], s.values[:2], target)
    free = predict(fitted, target, [(None, mid.settings)], None).runs[0]
    tight = predict(fitted, target, [(None, mid.settings)], free.peak_reserved_bytes // 2).runs[0]
    assert free.fits is None and tight.oom is not None and tight.fits is False
    assert tight.oom.reserved_bytes <= free.peak_reserved_bytes // 2
    assert tight.oom.site.startswith("sample_snapshots/workloads/gpt.py:")  # the workload's own line
    roomy = predict(fitted, target, [(None, mid.settings)], free.peak_reserved_bytes).runs[0]
    assert roomy.oom is None and roomy.fits is True  # its own peak fits
