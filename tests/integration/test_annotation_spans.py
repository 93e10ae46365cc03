"""external_annotations as spans: START/END pairs matched by name, placed on the trace by their times."""
from __future__ import annotations

from tests.support.annotated_trace import SPANS_BY_EVENT, T0, annotated_snapshot
from fragviz.library.ingest import ingest_file
from fragviz.snapshot import read_raw
from fragviz.library import Library, pair_annotations
from fragviz.store.engine import open_store
from tests.support.helpers import real, write_pickle


def test_pairs_match_by_name_and_nest():
    a = [{"stage": "START", "name": "outer", "device": 0, "time_us": 10},
         {"stage": "START", "name": "inner", "device": 0, "time_us": 20},
         {"stage": "START", "name": "inner", "device": 0, "time_us": 30},  # nested in the first inner
         {"stage": "END", "name": "inner", "device": 0, "time_us": 40},
         {"stage": "END", "name": "inner", "device": 0, "time_us": 50},
         {"stage": "END", "name": "stray", "device": 0, "time_us": 55},  # no START: dropped
         {"stage": "START", "name": "other device", "device": 1, "time_us": 60},
         {"stage": "START", "name": "open", "device": 0, "time_us": 70}]
    assert pair_annotations(list(reversed(a)), 0) == [("outer", 10, None), ("inner", 20, 50), ("inner", 30, 40),
                                                       ("open", 70, None)]
    assert pair_annotations(a, 1) == [("other device", 60, None)]
    assert pair_annotations([{"stage": "START", "name": "x"}, "junk"], 0) == []  # no time: not placed


def ingested(tmp_path, path: str) -> tuple[Library, int]:
    db = str(tmp_path / "store.sqlite")
    conn = open_store(db)
    try:
        result = ingest_file(conn, path)
    finally:
        conn.close()
    assert result.id is not None, result.error
    return Library.open(db), result.id


def test_spans_of_a_hand_made_trace(tmp_path):
    path = write_pickle(str(tmp_path / "annotated.pickle"), annotated_snapshot())
    reader, sid = ingested(tmp_path, path)
    spans = reader.annotation_spans(sid, 0)
    assert [(s.name, s.start_event, s.end_event) for s in spans] == SPANS_BY_EVENT
    assert spans[0].start_us == T0 + 1500 and spans[0].end_us == T0 + 4500 and all(s.closed for s in spans)
    assert "annotation" not in reader.markers(sid, 0)  # spans, not ticks


def test_spans_of_a_real_training_step(tmp_path):
    path = real("cs336kk_ctx128_fullstep.pickle")
    raw = read_raw(path).data
    times = [e["time_us"] for e in raw["device_traces"][0]]
    reader, sid = ingested(tmp_path, path)
    spans = reader.annotation_spans(sid, 0)
    assert [s.name for s in spans] == ["Optimizer.zero_grad#AdamW.zero_grad", "Optimizer.step#AdamW.step"]
    for s, (start, end) in zip(spans, [(1748729125402849, 1748729125403495), (1748729125615270, 1748729125698238)]):
        # the state of a time: every event before it done
        assert (s.start_us, s.end_us) == (start, end)
        assert s.start_event == sum(1 for t in times if t < start) and s.end_event == sum(1 for t in times if t < end)
    assert spans[1].end_event - spans[1].start_event > 100  # the optimizer step spans many events


def test_a_trace_without_times_has_no_spans(tmp_path):
    data = annotated_snapshot()
    for e in data["device_traces"][0]:
        del e["time_us"]
    reader, sid = ingested(tmp_path, write_pickle(str(tmp_path / "untimed.pickle"), data))
    assert reader.annotation_spans(sid, 0) == []

