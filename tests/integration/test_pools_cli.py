"""`fragviz report` on a real file with private pools and pending frees, as a user runs it."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from fragviz.snapshot import read_raw
from tests.support.helpers import MiB, real

FRAGVIZ = os.path.join(os.path.dirname(sys.executable), "fragviz")
VERL = real("verl_mempools_pending.pickle")
POOL_KEYS = ["pool", "reserved_bytes", "allocated_bytes", "free_bytes", "largest_free_block", "non_releasable_bytes",
             "fragmentation", "free_scatter"]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([FRAGVIZ, *args], capture_output=True, text=True, timeout=300)


def raw_by_pool() -> dict[tuple[int, int], tuple[int, int, int, int]]:
    """(reserved, active, free, largest free) per pool, from the raw segments and PyTorch's own active_size."""
    out: dict[tuple[int, int], list[int]] = {}
    for seg in read_raw(VERL).data["segments"]:
        p = out.setdefault(tuple(seg["segment_pool_id"]), [0, 0, 0, 0])
        free = [b["size"] for b in seg["blocks"] if b["state"] == "inactive"]
        p[0] += seg["total_size"]
        p[1] += seg["active_size"]
        p[2] += sum(free)
        p[3] = max([p[3], *free])
    return {k: tuple(v) for k, v in out.items()}


def test_report_json_lists_the_pools_general_first():
    done = run("report", VERL, "--json")
    assert done.returncode == 0, done.stderr
    (device,) = json.loads(done.stdout)["devices"]
    want = raw_by_pool()
    assert [p["pool"] for p in device["pools"]] == [[0, 0], [0, 1], [0, 2]]
    for p in device["pools"]:
        assert list(p) == POOL_KEYS
        reserved, active, free, largest = want[tuple(p["pool"])]
        assert (p["reserved_bytes"], p["allocated_bytes"], p["free_bytes"], p["largest_free_block"]) == (
            reserved, active, free, largest)
    pending = sum(s["active_size"] - s["allocated_size"] for s in read_raw(VERL).data["segments"])
    assert (device["pending_free_blocks"], device["pending_free_bytes"]) == (9, pending)
    for key in ("reserved_bytes", "allocated_bytes", "free_bytes", "largest_free_block", "fragmentation",
                "non_releasable_bytes", "free_scatter", "at_peak"):
        assert key in device  # the keys from before stay


def test_report_from_the_store_gives_the_same_pools(tmp_path):
    db = str(tmp_path / "s.sqlite")
    assert run("ingest", VERL, "--db", db).returncode == 0
    stored = json.loads(run("report", "1", "--db", db, "--json").stdout)["devices"][0]
    from_file = json.loads(run("report", VERL, "--json").stdout)["devices"][0]
    assert stored["pools"] == from_file["pools"] and stored["pending_free_bytes"] == from_file["pending_free_bytes"]


def test_text_report_names_the_private_pools_and_the_pending_frees():
    done = run("report", VERL)
    assert done.returncode == 0, done.stderr
    kv_reserved = raw_by_pool()[(0, 2)][0]
    assert f"pool (0, 2)    {kv_reserved / 2**30:.2f} GiB  in 24 segments, fully allocated" in done.stdout
    assert done.stdout.count("a private pool (CUDA graph or torch.cuda.MemPool); general requests cannot use its "
                             "free memory") == 2
    pending = sum(s["active_size"] - s["allocated_size"] for s in read_raw(VERL).data["segments"])
    assert (f"pending free 9 blocks ({pending / MiB:.2f} MiB) in pool (0, 0) freed but waiting for other streams "
            "(active_pending_free)") in done.stdout
