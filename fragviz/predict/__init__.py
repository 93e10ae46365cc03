"""Predict before you run: the memory of a bigger run from recordings of the same program at smaller sizes.

- `workload`: one recording's requests, with each allocation's size and site (`recorded_workload`).
- `match`: two recordings matched allocation to allocation (`align`).
- `laws`: how each allocation's size follows the knob, the laws its recordings allow and the one chosen
  (`fit_laws`).
- `forecast`: the recordings matched and fitted (`plan`); `causes`: why recordings cannot be predicted from.
- `runs`: the program written at a size and free-run through the allocator model (`run_at`).
- `prediction`: the prediction at one size (`predict`), with `doubt`: its range and warnings.
- `fitting`: the largest size that fits a device, safe and under the chosen laws (`fit_search`).
- `text`: the same for a terminal.
"""
from __future__ import annotations

from fragviz.predict.fitting import FitAnswer, fit_search
from fragviz.predict.forecast import Plan, plan, plan_recordings, settings_for
from fragviz.predict.prediction import Prediction, predict
from fragviz.predict.runs import PredictedRun, run_at
from fragviz.predict.workload import PredictionRefused, recorded_workload, traced_device

__all__ = ["FitAnswer", "Plan", "Prediction", "PredictedRun", "PredictionRefused", "fit_search", "plan",
           "plan_recordings", "predict", "recorded_workload", "run_at", "settings_for", "traced_device"]
