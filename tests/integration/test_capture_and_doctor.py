"""Capture without a GPU (a real PyTorch script on the CPU, served by the allocator model) and the OOM
doctor on the snapshots it makes."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from fragviz.replay.analysis import analyze
from fragviz.doctor import PUBLIC_KEYS, diagnose
from fragviz.doctor.report import report_of
from fragviz.snapshot import load_snapshot

FRAGVIZ = os.path.join(os.path.dirname(sys.executable), "fragviz")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MiB = 1024**2

SCRIPT = """
import torch
a = torch.empty(1000, dtype=torch.uint8)
b = torch.empty(3 * 1024 * 1024, dtype=torch.uint8)
del a
"""

HOG = """
import torch
keep = [torch.empty(20 * 1024 * 1024, dtype=torch.uint8) for _ in range(3)]
big = torch.empty(12 * 1024 * 1024, dtype=torch.uint8)
"""


def capture(tmp_path, script: str, *options: str) -> tuple[subprocess.CompletedProcess, str]:
    src = tmp_path / "work.py"
    src.write_text(textwrap.dedent(script))
    out = str(tmp_path / "snap.pickle")
    proc = subprocess.run([FRAGVIZ, "capture", "--out", out, *options, "--", "python", str(src)],
                          capture_output=True, text=True, timeout=300)
    return proc, out


def test_simulated_capture_records_storages_with_their_stacks(tmp_path):
    proc, out = capture(tmp_path, SCRIPT, "--device-memory", "1GiB")
    assert proc.returncode == 0, proc.stderr
    analysis = analyze(load_snapshot(out))
    assert analysis.snapshot.provenance["origin"] == "simulated"
    assert any("simulated by fragviz" in w for w in analysis.warnings)
    d = report_of(analysis).devices[0]
    # a: 1000 B -> a 2 MiB small segment, freed; b: 3 MiB -> a 20 MiB large segment, split, still live
    assert (d.reserved_bytes, d.allocated_bytes, d.requested_bytes) == (22 * MiB, 3 * MiB, 3 * MiB)
    assert d.trace_actions == {"segment_alloc": 2, "alloc": 2, "free_requested": 1, "free_completed": 1}
    (seg,) = [s for s in analysis.snapshot.segments if s.pool == "large"]
    frames = analysis.snapshot.stack_frames(seg.blocks[0].stack)  # innermost first; torch's own frames too
    user = next(f for f in frames if f.filename.endswith("work.py"))
    assert (user.filename, user.line) == (str(tmp_path / "work.py"), 4)


def test_simulated_oom_raises_in_the_script_and_is_diagnosed(tmp_path):
    proc, out = capture(tmp_path, HOG, "--device-memory", "64MiB")
    assert proc.returncode == 1 and "OutOfMemoryError" in proc.stderr and "CUDA out of memory" in proc.stderr
    analysis = analyze(load_snapshot(out))
    assert analysis.snapshot.trace_of(0).action_counts()["oom"] == 1
    (oom,) = diagnose(analysis)
    # three 20 MiB tensors take three 20 MiB segments; 12 MiB more needs a 12 MiB segment: 72 > 64 MiB
    assert oom.verdict == "exhaustion" and oom.requested_bytes == 12 * MiB
    assert (oom.allocated_bytes, oom.reserved_bytes, oom.device_free_bytes) == (60 * MiB, 60 * MiB, 4 * MiB)
    assert all(not w.avoids_oom for w in oom.what_if)
    assert not any(a.startswith("Set PYTORCH_CUDA_ALLOC_CONF") for a in oom.advice)  # the simulation says no


def test_the_doctor_on_the_fragmentation_sample():
    path = os.path.join(ROOT, "sample_snapshots", "gpt_train_fragmentation_oom.pickle.gz")
    out = subprocess.run([FRAGVIZ, "doctor", path, "--json"], capture_output=True, text=True, timeout=300)
    (oom,) = json.loads(out.stdout)["ooms"]
    assert tuple(oom) == PUBLIC_KEYS
    assert oom["verdict"] == "fragmentation"
    assert oom["reserved_bytes"] - oom["allocated_bytes"] > oom["requested_bytes"] > oom["largest_free_block"]
    expandable = next(w for w in oom["what_if"] if w["alloc_conf"] == "expandable_segments:True")
    # the recording ends at its OOM: the simulation gets past it, and cannot say more
    assert expandable["outcome"] == "gets_past_recorded_failure" and expandable["avoids_oom"] is None
    assert "no OOM up to the end of the recording" in expandable["summary"]
    assert any("expandable_segments:True gets past this OOM; the recording ends there" in a for a in oom["advice"])
    assert any("expandable_segments:True" in a for a in oom["advice"])


def test_the_doctor_command_on_messages():
    out = subprocess.run([FRAGVIZ, "doctor", "--message", "RuntimeError: CUDA out of memory. Tried to allocate "
                          "2.00 MiB (GPU 0; 3.79 GiB total capacity; 654.97 MiB already allocated; 6.00 MiB free; "
                          "666.00 MiB reserved in total by PyTorch)", "--json"], capture_output=True, text=True)
    (oom,) = json.loads(out.stdout)["ooms"]
    # 3.79 GiB card, 666 MiB reserved by PyTorch, 6 MiB free: over 3 GiB is held outside PyTorch
    assert oom["verdict"] == "outside_pytorch" and oom["requested_bytes"] == 2 * MiB
    text = subprocess.run([FRAGVIZ, "doctor", "--message", "CUDA error: out of memory"], capture_output=True,
                          text=True)
    assert "memory outside PyTorch" in text.stdout
    none = subprocess.run([FRAGVIZ, "doctor", "--message", "all good"], capture_output=True, text=True)
    assert none.returncode == 2 and "no CUDA out-of-memory message" in none.stderr


def test_a_snapshot_and_its_message_together():
    path = os.path.join(ROOT, "sample_snapshots", "gpt_train.pickle.gz")
    message = ("CUDA out of memory. Tried to allocate 40.00 MiB. GPU 0 has a total capacity of 2.00 GiB of which "
               "0 bytes is free. Of the allocated memory 1.90 GiB is allocated by PyTorch, and 100.00 MiB is reserved "
               "by PyTorch but unallocated.")
    analysis = analyze(load_snapshot(path))
    (oom,) = diagnose(analysis, message, simulate=False)
    assert oom.verdict == "fragmentation"
    assert oom.largest_free_block == report_of(analysis).devices[0].largest_free_block


def test_capture_as_a_context_manager(tmp_path):
    torch = pytest.importorskip("torch")
    import fragviz

    path = str(tmp_path / "ctx.pickle")
    with fragviz.capture(path, device_memory=64 * MiB, simulate=True):
        x = torch.ones(1024, 1024)  # 4 MiB
        y = x * 2
        del x
    d = report_of(analyze(load_snapshot(path))).devices[0]
    assert d.allocated_bytes == 4 * MiB and d.trace_actions["alloc"] == 2
    assert y.shape == (1024, 1024)
