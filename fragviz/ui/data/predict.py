"""The what-if page's prediction (`fragviz predict` on stored snapshots): the request as typed, checked as the
command line checks its arguments; the same prediction's command line; and the work of one run, read through the
app's views (no Dash here)."""
from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass
from typing import Callable, Sequence

from fragviz.allocator.config import parse_alloc_conf
from fragviz.base.errors import UsageError
from fragviz.base.units import parse_size
from fragviz.gate.budgets import size_text
from fragviz.predict import Prediction, plan_recordings, predict, settings_for
from fragviz.predict.runs import as_number
from fragviz.replay.analysis import trace_totals
from fragviz.ui.data.views import Views

MAX_OTHERS = 2  # this snapshot and one or two others: a third recording sharpens the laws, more only costs time
DEFAULT_KNOB = "size"  # the command line's, where the knob's box is blank


@dataclass(frozen=True)
class PredictRequest:
    """A prediction asked for: the stored recordings (the page's snapshot first), the knob's value in each, the value
    to predict, the device, and the device memory and PYTORCH_CUDA_ALLOC_CONF to run under (None: not given, the
    recorded settings)."""

    sids: tuple[int, ...]
    sizes: tuple[float, ...]
    knob: str
    target: float
    device: int
    memory: int | None = None
    conf: str | None = None


@dataclass(frozen=True)
class SizePoint:
    """Peak requested and reserved bytes at one value of the knob: a recording's, or the prediction's."""

    knob: float
    peak_requested: int
    peak_reserved: int
    predicted: bool = False


@dataclass(frozen=True)
class PredictionShown:
    """What the card shows of one run: the prediction, and the recordings' and the prediction's peaks."""

    prediction: Prediction
    points: tuple[SizePoint, ...]


def numbers(text: str | None, what: str) -> list[float]:
    """The numbers in `text`, split by spaces or commas; a UsageError naming `what` where one is not a number."""
    out = []
    for word in (w for w in re.split(r"[\s,]+", (text or "").strip()) if w):
        try:
            out.append(float(word))
        except ValueError:
            raise UsageError(f"{what}: '{word[:40]}' is not a number") from None
    return out


def _target(text: str | None) -> float:
    found = numbers(text, "predict at")
    if len(found) != 1:
        raise UsageError("predict at: give the knob's value to predict, one number (e.g. 32)")
    return found[0]


def _sizes(text: str | None, recordings: int) -> tuple[float, ...]:
    sizes = numbers(text, "sizes")
    if len(sizes) != recordings:
        raise UsageError(f"sizes: {len(sizes)} given for {recordings} recordings: give one per recording, this "
                         "snapshot's first, then the others in the order picked")
    if len(set(sizes)) != len(sizes):
        raise UsageError("sizes: each recording must be at a different size")
    return tuple(sizes)


def _others(sid: int, picked: Sequence[int] | None) -> tuple[int, ...]:
    others = tuple(dict.fromkeys(int(p) for p in (picked or ()) if int(p) != sid))
    if not others or len(others) > MAX_OTHERS:
        raise UsageError("pick one or two other recordings of the same program, at other sizes of the knob")
    return others


def predict_request(sid: int, picked: Sequence[int] | None, sizes: str | None, knob: str | None,
                    target: str | None, device: int, memory: str | None, conf: str | None) -> PredictRequest:
    """The request typed on the page, or a UsageError with the one-line reason (what `fragviz predict` checks
    before it reads a recording)."""
    sids = (sid, *_others(sid, picked))
    values, at = _sizes(sizes, len(sids)), _target(target)
    if any(not math.isfinite(v) or v <= 0 for v in (*values, at)):
        raise UsageError("sizes and predict at must be finite numbers above 0")
    conf = (conf or "").strip() or None
    if conf is not None:
        parse_alloc_conf(conf)  # a setting not understood fails before any recording is read
    capacity = parse_size(memory.strip()) if (memory or "").strip() else None
    return PredictRequest(sids, values, (knob or "").strip() or DEFAULT_KNOB, at, device, capacity, conf)


def predict_command(r: PredictRequest) -> str:
    """The `fragviz predict` command line that makes the same prediction from the same store."""
    words = ["fragviz", "predict", *(str(s) for s in r.sids), "--sizes", *(str(as_number(v)) for v in r.sizes),
             "--to", str(as_number(r.target)), "--knob", r.knob, "--device", str(r.device)]
    if r.memory is not None:
        words += ["--device-memory", size_text(r.memory)]
    if r.conf is not None:
        words += ["--alloc-conf", r.conf]
    return " ".join(shlex.quote(w) for w in words)


def run_prediction(views: Views, r: PredictRequest, progress: Callable[[float], None]) -> PredictionShown:
    """The prediction, with the recordings' own peaks beside it; PredictionRefused (or another FragvizError) with
    the reason where it cannot be made. Without settings, the run is simulated under those recorded with the
    recording it is predicted from (the one nearest the target)."""
    steps = len(r.sids) + 2
    analyses = []
    for i, sid in enumerate(r.sids):
        analyses.append(views.analysis(sid))
        progress((i + 1) / steps)
    fitted = plan_recordings(analyses, r.sizes, r.target, r.device)
    progress((len(r.sids) + 1) / steps)
    confs = [] if r.conf is None else [(r.conf, parse_alloc_conf(r.conf))]
    prediction = predict(fitted, r.target, settings_for(fitted, analyses, confs), r.memory, r.knob)
    recorded = [SizePoint(v, t.peak_requested, t.peak_reserved) for v, t in
                ((v, trace_totals(a.snapshot, r.device)) for v, a in zip(r.sizes, analyses))]
    head = prediction.runs[0]
    predicted = SizePoint(r.target, head.peak_requested_bytes, head.peak_reserved_bytes, True)
    return PredictionShown(prediction, tuple(sorted([*recorded, predicted], key=lambda p: p.knob)))
