"""Live recordings in a real SQLite store: what the poller writes is what the page reads."""
from __future__ import annotations

import time

from fragviz.store.live import LiveRecorder
from fragviz.library import Library
from fragviz.store.engine import open_store


def stats(pid: int, reserved: int, t: float) -> dict:
    dev = {"device": 0, "allocated_bytes": reserved // 2, "reserved_bytes": reserved, "active_bytes": reserved // 2,
           "requested_bytes": reserved // 2 - 1, "inactive_split_bytes": 3, "num_alloc_retries": 1, "num_ooms": 0,
           "device_total_bytes": 10 * reserved, "device_free_bytes": 9 * reserved, "nvml_used_bytes": None,
           "largest_free_block": reserved // 4, "fragmentation": 0.5, "processes": []}
    return {"time": t, "pid": pid, "simulated": True, "rank": 3, "devices": [dev, {**dev, "device": 1}],
            "agent": {"polls": 1, "cpu_seconds": 0.0}}


def test_samples_events_and_state_round_trip(store_db):
    db = store_db
    conn = open_store(db)
    rec = LiveRecorder(conn)
    aid = rec.open_attachment("127.0.0.1:9400", "cli")
    now = time.time()
    rec.record(aid, stats(11, 1000, now), gap=False)
    rec.record(aid, stats(12, 2000, now + 1), gap=True)
    rec.event(aid, "restarted", "pid 11 -> 12", t=now + 1)
    rec.state(aid, now + 1, [{"device": 1, "address": 4096, "total_size": 2048, "stream": 0, "pool": "large",
                              "pool_id": [0, 0], "is_expandable": False,
                              "blocks": [[4096, 1024, 1000, "active_allocated"], [5120, 1024, 0, "inactive"]]}])
    reader = Library.open(db)
    (att,) = reader.live.attachments()
    assert (att.id, att.pid, att.rank, att.simulated, att.is_live()) == (aid, 12, 3, True, True)
    s = reader.live.samples(aid, device=0)
    assert s["reserved"] == [1000, 2000] and s["gap"] == [0, 1] and s["pid"] == [11, 12]
    assert s["nvml_used"] == [None, None] and s["fragmentation"] == [0.5, 0.5]
    assert reader.live.samples(aid, after_id=s["id"][0], device=0)["reserved"] == [2000]
    assert reader.live.devices(aid) == [0, 1]
    (ev,) = reader.live.events(aid)
    assert (ev.kind, ev.detail) == ("restarted", "pid 11 -> 12")
    t, (seg,) = reader.live.latest_state(aid, 1)
    assert t == now + 1 and [b.size for b in seg.blocks] == [1024, 1024] and seg.blocks[1].state.value == "inactive"
    assert reader.live.latest_state(aid, 0) is None
    rec.end(aid)
    assert not reader.live.attachment(aid).is_live()
    reader.close()
    conn.close()
