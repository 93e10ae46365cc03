"""Predict before you run: the memory of a bigger run from recordings of the same program at smaller sizes.

- `workload`: one recording's requests, with each allocation's size and site (`recorded_workload`).
- `match`: two recordings matched allocation to allocation (`align`).
- `laws`: how each allocation's size follows the knob: constant, linear, quadratic or a fitted power (`fit_laws`).
- `forecast`: the recordings matched and fitted (`plan`), the program's workload written at the target size and
  free-run through the allocator model (`predict`), the largest size that fits a device (`fit_search`).
- `text`: the same for a terminal.
"""
from __future__ import annotations

from fragviz.predict.forecast import (FitAnswer, Plan, Prediction, PredictedRun, fit_search, plan, plan_recordings,
                                      predict, run_at, settings_for)
from fragviz.predict.workload import PredictionRefused, recorded_workload, traced_device

__all__ = ["FitAnswer", "Plan", "Prediction", "PredictedRun", "PredictionRefused", "fit_search", "plan", "plan_recordings", "predict",
           "recorded_workload", "run_at", "settings_for", "traced_device"]
