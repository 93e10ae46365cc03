"""The what-if page's code what-ifs and its prediction card, in a real browser against a real server: a scaled
workload's simulated peak equals the peak worked out here from the trace; a paged KV cache on a run without one is
refused with the reason and nothing drawn; a prediction from the runs at batch 4 and 8 finds the recorded run at
batch 16's peak, and one from two different programs is refused."""
from __future__ import annotations

import json
import math
import os

import numpy as np

from fragviz.base.units import format_bytes, parse_size
from fragviz.model import ALLOC, FREE_COMPLETED
from fragviz.replay.analysis import analyze, trace_totals
from fragviz.snapshot import load_snapshot
from fragviz.usage.kinds import StackKinds
from tests.support.helpers import ROOT
from tests.support.pages import wait_for_plot, wait_settled

TRAIN = os.path.join(ROOT, "sample_snapshots", "gpt_train.pickle.gz")
PREDICT = os.path.join(ROOT, "tests", "data", "predict")
KIND, FACTOR = "activations", 1.5
SCALED = "activations and temporaries ×1.5, under expandable_segments:True"  # the what-if's label


def scaled_peak_requested(path: str, kind: str, factor: float) -> tuple[int, int]:
    """The recorded peak of requested bytes, and the peak once every allocation of `kind` asks for `factor` times
    its bytes (rounded up): each block's requested bytes counted from its alloc to its free, walking the trace.
    For activations, the backward pass's copies count too (docs/simulate.md): a gradients allocation of a size
    the activations requested and no parameter did."""
    snap = load_snapshot(path)
    replay = analyze(snap).replays[0]
    trace = replay.trace
    assert replay.pre_trace_blocks == 0, "the walk starts from an empty device"
    kind_of = StackKinds(snap.stack_frames)
    allocs = trace.action == ALLOC
    kinds = np.asarray([kind_of(s) for s in trace.stack.tolist()], object)
    chosen = allocs & (kinds == kind)
    if kind == "activations":
        copies = set(trace.size[chosen].tolist()) - set(trace.size[allocs & (kinds == "parameters")].tolist())
        chosen |= allocs & (kinds == "gradients") & np.isin(trace.size, list(copies))
    assert chosen.any()
    scaled = np.where(chosen, np.ceil(trace.size.astype(np.float64) * factor), trace.size).astype(np.int64)
    peaks = []
    for sizes in (trace.size.astype(np.int64), scaled):
        delta, live = np.zeros(len(trace), np.int64), {}
        for i in np.nonzero(allocs | (trace.action == FREE_COMPLETED))[0].tolist():
            if allocs[i]:
                live[int(trace.addr[i])] = delta[i] = sizes[i]
            else:
                delta[i] = -live.pop(int(trace.addr[i]))
        peaks.append(int(np.cumsum(delta)[allocs].max()))
    return peaks[0], peaks[1]


def table_rows(page) -> list[list[str]]:
    return page.evaluate("[...document.querySelectorAll('#whatif-status table tbody tr')]"
                         ".map(r => [...r.cells].map(c => c.innerText))")


def wait_text(page, selector: str, text: str, timeout: int = 90000) -> None:
    page.wait_for_function(f"(document.querySelector({json.dumps(selector)}) || {{innerText: ''}}).innerText"
                           f".includes({json.dumps(text)})", timeout=timeout)


def open_whatif(page, server, sid: int) -> None:
    page.goto(f"{server.url}/whatif/{sid}?device=0")
    page.wait_for_selector("#whatif-run")
    # the empty figure drawn (it moves the prediction card down the page), and no callback in flight
    page.wait_for_selector("#whatif-timeline .main-svg")
    wait_settled(page)


def test_a_scaled_workload_peaks_where_the_trace_says(page, server):
    recorded, expected = scaled_peak_requested(TRAIN, KIND, FACTOR)
    assert format_bytes(expected) != format_bytes(recorded)
    open_whatif(page, server, server.sample_id("gpt_train.pickle.gz"))
    page.fill("#whatif-scale", "activations")  # no factor: refused before anything runs
    page.click("#whatif-run")
    wait_text(page, "#whatif-status", "write TARGET=FACTOR")
    assert page.locator("#whatif-status .fv-error").count() == 1 and page.locator("#whatif-status table").count() == 0
    page.fill("#whatif-scale", f"{KIND}={FACTOR}")
    page.click("#whatif-run")
    page.wait_for_selector("#whatif-status table", timeout=120000)
    rows = table_rows(page)
    assert rows[0][0] == "recorded" and rows[0][2] == format_bytes(recorded)
    assert rows[2][0] == f"simulated, {SCALED}"
    assert rows[2][2] == format_bytes(expected) and rows[2][3] == "not simulated (device size unknown)"
    page.wait_for_function("(() => { const p = document.querySelector('#whatif-timeline .js-plotly-plot');"
                           " return p && p.data && p.data.length === 4; })()")
    names = page.evaluate("document.querySelector('#whatif-timeline .js-plotly-plot').data.map(t => t.name)")
    assert names[2] == f"reserved, {SCALED}"
    assert page.errors == []


def test_a_paged_kv_cache_without_one_is_refused(page, server):
    snap = load_snapshot(TRAIN)
    trace, kind_of = snap.trace_of(0), StackKinds(snap.stack_frames)
    assert not any(kind_of(s) == "kv_cache" for s in trace.stack[trace.action == ALLOC].tolist())
    open_whatif(page, server, server.sample_id("gpt_train.pickle.gz"))
    page.fill("#whatif-paged-kv", "2MiB")
    page.click("#whatif-run")
    page.wait_for_selector("#whatif-status .fv-cannot", timeout=120000)
    assert page.locator("#whatif-status").inner_text().startswith(
        "Cannot simulate cuda:0: KV cache in 2.00 MiB pages: device 0's trace holds no allocation of KV cache")
    assert page.locator("#whatif-status table").count() == 0
    drawn = page.evaluate("(() => { const p = document.querySelector('#whatif-timeline .js-plotly-plot');"
                          " return p && p.data ? p.data.length : 0; })()")
    assert drawn == 0
    assert page.errors == []


def ask_prediction(page, other: str, sizes: str, to: str, memory: str = "") -> None:
    page.click("#whatif-predict-with")
    # into the list's search box once it is open (keys typed before it opens are lost): the one option left
    page.fill("input.dash-dropdown-search", other)
    page.click(f"[role=option]:has-text('{other}')")
    page.keyboard.press("Escape")
    page.fill("#whatif-conf", "")  # the recorded settings
    page.fill("#whatif-memory", memory)
    page.fill("#whatif-predict-sizes", sizes)
    page.fill("#whatif-predict-to", to)
    page.click("#whatif-predict-run")


def predicted_figures(page) -> dict[str, str]:
    return dict(page.evaluate("[...document.querySelectorAll('#whatif-predict-result .fv-predict-figures tr')]"
                              ".map(r => [r.cells[0].innerText, r.cells[1].innerText])"))


def test_a_bigger_run_predicted_from_two_smaller_ones(page, server):
    small, mid = (server.upload(os.path.join(PREDICT, f"train_batch_{b}.pickle.gz")) for b in (4, 8))
    big = trace_totals(load_snapshot(os.path.join(PREDICT, "train_batch_16.pickle.gz")), 0)
    # two different programs: refused, with the reason and no figure
    open_whatif(page, server, small)
    ask_prediction(page, "gpt_train.pickle.gz", "4 8", "16")
    wait_text(page, "#whatif-predict-result", "Cannot predict: ")
    assert "do not match between the recordings" in page.locator("#whatif-predict-result").inner_text()
    assert page.locator("#whatif-predict-figure").count() == 0 and page.locator("#whatif-predict-laws").count() == 0

    open_whatif(page, server, small)
    ask_prediction(page, "train_batch_8.pickle.gz", "4 8", "16", "1GiB")
    page.wait_for_selector("#whatif-predict-result .fv-predict-figures", timeout=120000)
    figures = predicted_figures(page)
    number, unit = figures["peak requested"].split()
    predicted = float(number) * parse_size(f"1{unit}")
    assert math.isclose(predicted, big.peak_requested, rel_tol=0.05), (figures, big)
    assert figures["fits the device?"] == "fits a device of 1.00 GiB: no OOM"
    # every size a pure power of the batch: the laws are certain, so the range is the point, and no warning
    assert figures["peak requested, range"] == figures["peak requested"]
    assert figures["peak reserved, range"] == figures["peak reserved"]
    assert page.locator("#whatif-predict-warnings").count() == 0
    assert "Matched 920 of 920 allocations" in page.locator("#whatif-predict-result").inner_text()
    laws = page.evaluate("[...document.querySelectorAll('#whatif-predict-laws tbody tr')].map(r => r.cells.length)")
    assert 0 < len(laws) <= 15 and set(laws) == {5}  # site, law, batch 4, batch 8, batch 16
    assert page.locator("#whatif-predict-command").inner_text() == (
        f"fragviz predict {small} {mid} --sizes 4 8 --to 16 --knob batch --device 0 --device-memory 1GiB")
    wait_for_plot(page, "whatif-predict-figure")
    bars = page.evaluate("document.querySelector('#whatif-predict-figure .js-plotly-plot').data"
                         ".map(t => [t.name, t.x])")
    assert bars == [[name, ["batch 4 (recorded)", "batch 8 (recorded)", "batch 16 (predicted)"]]
                    for name in ("peak requested", "peak reserved")]
    assert page.errors == []


def test_a_prediction_the_recordings_cannot_pin_down_shows_its_range_and_why(page, server):
    # a prefix of 49 tokens: sizes are a + b·seq, which two recordings cannot tell from a power of seq
    shapes = os.path.join(ROOT, "tests", "data", "predict_shapes")
    small, mid = (server.upload(os.path.join(shapes, f"affine_{s}.pickle.gz")) for s in (32, 64))
    recorded = trace_totals(load_snapshot(os.path.join(shapes, "affine_256.pickle.gz")), 0)
    open_whatif(page, server, small)
    page.fill("#whatif-predict-knob", "seq")
    ask_prediction(page, "affine_64.pickle.gz", "32 64", "256")
    page.wait_for_selector("#whatif-predict-result .fv-predict-figures", timeout=120000)
    figures = predicted_figures(page)
    low, high = (parse_size(x.replace(" ", "")) for x in figures["peak requested, range"].split(" to "))
    assert low <= recorded.peak_requested <= high  # the range holds what the program at 256 recorded
    warnings = page.locator("#whatif-predict-warnings").inner_text()
    assert "two recordings cannot tell apart the laws of" in warnings and "a recording at seq 128" in warnings
    assert page.errors == []
