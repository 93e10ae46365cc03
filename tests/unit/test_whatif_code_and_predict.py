"""The what-if page's code what-ifs and prediction card without a server: the boxes as the page reads them (and
refuses them, in one line), the command line it offers (which `fragviz predict` reads back as the same request),
the prediction read through a real store (equal to the one made from the files), its figure and its panels."""
from __future__ import annotations

import os
import shlex

import pytest

from fragviz.base.errors import FragvizError, UsageError
from fragviz.base.units import GiB, MiB
from fragviz.cli.parser import build_parser
from fragviz.library import Library
from fragviz.library.ingest import ingest_file
from fragviz.predict import plan, predict, recorded_workload
from fragviz.replay.analysis import analyze, trace_totals
from fragviz.simulate.reshape import BUCKET, KV_CACHE, PAGED_KV, SCALE
from fragviz.snapshot import load_snapshot
from fragviz.store.engine import open_store
from fragviz.ui.data.code_changes import code_changes
from fragviz.ui.data.predict import PredictRequest, SizePoint, predict_command, predict_request, run_prediction
from fragviz.ui.data.views import Views
from fragviz.ui.figures.predict import prediction_figure
from fragviz.ui.pages.whatif.predict import SITES_SHOWN, prediction_panel, refused_panel
from tests.support.helpers import ROOT

PREDICT = os.path.join(ROOT, "tests", "data", "predict")
RUNS = [os.path.join(PREDICT, f"train_batch_{b}.pickle.gz") for b in (4, 8)]


def texts(component) -> list[str]:
    """Every string in a component tree, in order."""
    if isinstance(component, str):
        return [component]
    if isinstance(component, (list, tuple)):
        return [t for c in component for t in texts(c)]
    children = getattr(component, "children", None)
    return texts(children) if children is not None else []


def test_code_changes_as_typed():
    assert code_changes(None, "", "  ") == ()
    changes = code_changes("activations=1.5, gpt.py:forward=0.5,", "activations:8", "2MiB")
    assert [(c.how, c.target) for c in changes] == [(SCALE, "activations"), (SCALE, "gpt.py:forward"),
                                                    (BUCKET, "activations"), (PAGED_KV, KV_CACHE)]
    assert [c.factor for c in changes[:2]] == [1.5, 0.5] and changes[2].steps == 8 and changes[3].page_bytes == 2 * MiB
    assert code_changes("", "", "gpt.py:34=256KiB")[0].target == "gpt.py:34"


@pytest.mark.parametrize("boxes, reason", [
    (("activations", "", ""), "--scale 'activations': write TARGET=FACTOR"),
    (("activations=0", "", ""), "the factor must be a number above 0"),
    (("", "activations:many", ""), "--bucket 'activations:many': write TARGET:K"),
    (("", "", "100B"), "a page holds at least 512 bytes"),
])
def test_code_changes_not_understood_say_why_in_one_line(boxes, reason):
    with pytest.raises(UsageError) as err:
        code_changes(*boxes)
    assert reason in str(err.value) and "\n" not in str(err.value)


def test_the_prediction_boxes_as_read():
    r = predict_request(3, [5, 3, 5], "8, 16", " seq ", "32", 1, " 80GiB ", "  ")
    assert r == PredictRequest((3, 5), (8.0, 16.0), "seq", 32.0, 1, 80 * GiB, None)
    r = predict_request(3, [5, 7], "4 8 16", "", "64", 0, None, "expandable_segments:True")
    assert r.sids == (3, 5, 7) and r.knob == "size" and r.memory is None and r.conf == "expandable_segments:True"


@pytest.mark.parametrize("picked, sizes, target, memory, conf, reason", [
    ([], "8 16", "32", "", "", "pick one or two other recordings"),
    ([3], "8 16", "32", "", "", "pick one or two other recordings"),
    ([5, 6, 7], "8 16 24 32", "32", "", "", "pick one or two other recordings"),
    ([5], "8", "32", "", "", "sizes: 1 given for 2 recordings"),
    ([5], "8 8", "32", "", "", "each recording must be at a different size"),
    ([5], "8 sixteen", "32", "", "", "sizes: 'sixteen' is not a number"),
    ([5], "8 16", "", "", "", "predict at: give the knob's value to predict"),
    ([5], "8 16", "0", "", "", "must be finite numbers above 0"),
    ([5], "8 16", "inf", "", "", "must be finite numbers above 0"),
    ([5], "nan 16", "32", "", "", "must be finite numbers above 0"),
    ([5], "8 16", "32", "lots", "", "lots"),
    ([5], "8 16", "32", "", "no_such_setting:1", "no_such_setting"),
])
def test_prediction_boxes_not_understood_say_why(picked, sizes, target, memory, conf, reason):
    with pytest.raises(FragvizError) as err:  # a UsageError, or the settings' AllocConfError
        predict_request(3, picked, sizes, "batch", target, 0, memory, conf)
    assert reason in str(err.value) and "\n" not in str(err.value)


def test_the_command_line_is_the_same_request():
    r = PredictRequest((3, 5), (8.0, 16.5), "batch", 32.0, 1, 80 * GiB, "expandable_segments:True")
    command = predict_command(r)
    assert command == ("fragviz predict 3 5 --sizes 8 16.5 --to 32 --knob batch --device 1 --device-memory 80GiB "
                       "--alloc-conf expandable_segments:True")
    args = build_parser().parse_args(shlex.split(command)[1:])
    assert (args.recordings, args.sizes, args.to, args.knob, args.device, args.device_memory, args.alloc_conf) == (
        ["3", "5"], [8.0, 16.5], 32.0, "batch", 1, "80GiB", ["expandable_segments:True"])
    plain = predict_command(PredictRequest((3, 5), (8.0, 16.0), "batch", 32.0, 0))
    assert plain == "fragviz predict 3 5 --sizes 8 16 --to 32 --knob batch --device 0"


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """Views over a store holding the runs at batch 4 and 8, and their ids."""
    store = open_store(str(tmp_path_factory.mktemp("predict_data") / "store.sqlite"))
    sids = tuple(ingest_file(store, path).id for path in RUNS)
    reader = Library.open(store)
    yield Views(reader), sids
    reader.close()


def test_the_page_predicts_as_fragviz_predict_does_on_the_files(stored):
    views, sids = stored
    shares: list[float] = []
    shown = run_prediction(views, PredictRequest(sids, (4.0, 8.0), "batch", 16.0, 0, GiB), shares.append)
    analyses = [analyze(load_snapshot(p)) for p in RUNS]
    fitted = plan([recorded_workload(a, 0) for a in analyses], (4, 8), 16)
    expected = predict(fitted, 16, [(None, analyses[fitted.template].settings)], GiB, "batch").as_dict()
    got = shown.prediction.as_dict()
    assert {k: v for k, v in got.items() if k != "sources"} == {k: v for k, v in expected.items() if k != "sources"}
    recorded = [trace_totals(a.snapshot, 0) for a in analyses]
    head = shown.prediction.runs[0]
    assert shown.points == (SizePoint(4.0, recorded[0].peak_requested, recorded[0].peak_reserved),
                            SizePoint(8.0, recorded[1].peak_requested, recorded[1].peak_reserved),
                            SizePoint(16.0, head.peak_requested_bytes, head.peak_reserved_bytes, True))
    assert shares == sorted(shares) and 0 < shares[-1] <= 1

    panel = texts(prediction_panel(shown, "fragviz predict ..."))
    assert "fits a device of 1.00 GiB: no OOM" in panel and "fragviz predict ..." in panel
    assert "Matched 920 of 920 allocations (laws: 558 constant, 362 linear); every allocation matched between the " \
           "recordings." in panel
    unasked = run_prediction(views, PredictRequest(sids, (4.0, 8.0), "batch", 16.0, 0), lambda _: None)
    assert "not asked: the device size was not given (give a device memory above)" in texts(
        prediction_panel(unasked, ""))


def test_the_laws_table_lists_the_top_sites(stored):
    views, sids = stored
    shown = run_prediction(views, PredictRequest(sids, (4.0, 8.0), "batch", 16.0, 0), lambda _: None)
    panel = prediction_panel(shown, "")
    (table,) = [c for c in panel.children if getattr(c, "id", None) == "whatif-predict-laws"]
    head, body = table.children
    assert texts(head) == ["site", "law", "batch 4", "batch 8", "batch 16"]
    assert len(body.children) == min(SITES_SHOWN, len(shown.prediction.sites)) == SITES_SHOWN
    first = shown.prediction.sites[0]
    assert texts(body.children[0])[:2] == [first.site, first.law]


def test_a_refusal_says_why_and_keeps_the_command():
    shown = texts(refused_panel("a.pickle, b.pickle: cannot predict: 43.9% of the recorded bytes ...", "fragviz x"))
    assert shown[:2] == ["Cannot predict: ", "a.pickle, b.pickle: cannot predict: 43.9% of the recorded bytes ..."]
    assert "fragviz x" in shown


def test_the_figure_sets_the_predicted_size_beside_the_recorded_ones():
    points = (SizePoint(4, 100 * MiB, 120 * MiB), SizePoint(8, 200 * MiB, 230 * MiB),
              SizePoint(16, 400 * MiB, 450 * MiB, True))
    fig = prediction_figure("batch", points)
    assert [t.name for t in fig.data] == ["peak requested", "peak reserved"]
    assert list(fig.data[0].x) == ["batch 4 (recorded)", "batch 8 (recorded)", "batch 16 (predicted)"]
    assert list(fig.data[1].y) == [120, 230, 450] and fig.layout.yaxis.title.text == "MiB"
    assert list(fig.data[0].marker.pattern.shape) == ["", "", "/"]
