"""Code written for a GPU, recorded on this machine without one: `fragviz capture`, `fragviz run` and the pytest
plugin run the scripts of tests/cuda_code (the idioms real projects use) unchanged. Each script prints what
`torch.cuda` told it; the tests compare that with what fragviz recorded, and with sizes worked out by hand."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import threading
import urllib.request

from fragviz.gate.inputs import read_side
from fragviz.replay.analysis import analyze
from fragviz.snapshot import load_snapshot
from tests.support.helpers import wait_for

FRAGVIZ = os.path.join(os.path.dirname(sys.executable), "fragviz")
CODE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "cuda_code")
MiB = 1024**2
# PyTorch's own OOM message (c10, modern format), as the doctor and users' log parsers read it
OOM_MESSAGE = re.compile(r"^CUDA out of memory\. Tried to allocate [\d.]+ [KMG]iB\. GPU 0 has a total capacity of "
                         r"[\d.]+ [KMG]iB of which [\d.]+ [KMG]iB is free\. Including non-PyTorch memory, this process "
                         r"has [\d.]+ [KMG]iB memory in use\. Of the allocated memory [\d.]+ [KMG]iB is allocated by "
                         r"PyTorch, and [\d.]+ [KMG]iB is reserved by PyTorch but unallocated\. If reserved but "
                         r"unallocated memory is large try setting PYTORCH(_CUDA)?_ALLOC_CONF=expandable_segments:True "
                         r"to avoid fragmentation\.  See documentation for Memory Management  \(https://pytorch\.org/")


def capture(tmp_path, script: str, *args: str, device_memory: str = "16GiB") -> tuple[dict, str]:
    """Capture a script of tests/cuda_code; what it printed (one JSON line) and the snapshot's path."""
    out = str(tmp_path / f"{script}.pickle")
    proc = subprocess.run([FRAGVIZ, "capture", "--out", out, "--device-memory", device_memory, "--", "python",
                           os.path.join(CODE, script), *args], capture_output=True, text=True, timeout=600,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1]), out


def figures(path: str):
    return read_side(path, None).summary.devices[0]


def test_a_hugging_face_style_model_trained_with_autocast_and_a_grad_scaler(tmp_path):
    said, path = capture(tmp_path, "hf_style.py")
    assert said["device"] == "cuda:0"  # the model is on the (simulated) GPU, as the code asked
    recorded = figures(path)
    assert recorded.peak_allocated_bytes == said["max_memory_allocated"]
    assert recorded.peak_reserved_bytes == said["max_memory_reserved"]
    provenance = load_snapshot(path).provenance
    assert provenance["placement"] == "cuda tensors" and provenance["origin"] == "simulated"
    assert any("the tensors the code placed on CUDA, run on a CPU" in w for w in analyze(load_snapshot(path)).warnings)


def test_autocast_cuda_computes_in_half_precision_on_the_simulated_device(tmp_path):
    script = tmp_path / "amp.py"
    script.write_text(textwrap.dedent("""
        import json, torch
        layer = torch.nn.Linear(64, 64).cuda()
        x = torch.randn(8, 64, device="cuda")
        with torch.autocast("cuda"):
            y = layer(x)
        with torch.cuda.amp.autocast(dtype=torch.bfloat16):
            z = layer(x)
        print(json.dumps([str(y.dtype), str(z.dtype), y.is_cuda, torch.cuda.amp.GradScaler().is_enabled()]))
    """))
    proc = subprocess.run([FRAGVIZ, "capture", "--out", str(tmp_path / "a.pickle"), "--", "python", str(script)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1]) == ["torch.float16", "torch.bfloat16", True, True]


def test_a_pinned_data_loader_counts_the_batches_and_not_the_host_dataset(tmp_path):
    said, path = capture(tmp_path, "loader_pinned.py")
    assert said["weight_device"] == "cuda:0" and said["features_device"] == "cpu"
    weights = 256 * 64 * 4 + 512  # Linear(256, 64): the weight, and its 256-byte bias rounded up to 512
    assert said["memory_allocated"] == weights  # once the batches are freed, the parameters alone
    recorded = figures(path)
    assert recorded.peak_allocated_bytes == said["max_memory_allocated"]
    batch = 512 * 256 * 4  # one batch of features on the device
    assert batch < recorded.peak_allocated_bytes < 4 * MiB < 32 * MiB  # the 32 MiB dataset on the host is not counted
    snapshot = load_snapshot(path)
    live = sum(b.size for s in snapshot.segments for b in s.blocks if b.state.value == "active_allocated")
    assert live == weights


def test_a_script_that_asserts_its_own_peak_passes_and_fragviz_records_the_same_peak(tmp_path):
    said, path = capture(tmp_path, "asserts_own_memory.py")
    assert said["peak"] == 12 * MiB and said["now"] == 4 * MiB  # worked out by hand: 4 MiB + 8 MiB, then 4 MiB
    assert figures(path).peak_allocated_bytes == 12 * MiB
    # the 4 MiB tensor still lives in the one 20 MiB segment both came from (rounding of 1-10 MiB requests)
    assert said["reserved_after_empty_cache"] == 20 * MiB
    assert said["mem_get_info"] == [16 * 1024 * MiB - 20 * MiB, 16 * 1024 * MiB]


def test_an_out_of_memory_handler_that_retries_with_a_smaller_batch(tmp_path):
    said, path = capture(tmp_path, "oom_retry.py", "4096", device_memory="64MiB")
    assert said["failures"], "the first batch should not fit a 64 MiB device"
    assert said["batch"] < 4096 and said["rows"] == 4096 and said["out_device"] == "cpu"
    for failure in said["failures"]:
        assert OOM_MESSAGE.match(failure["message"]), failure["message"]
    snapshot = load_snapshot(path)
    assert snapshot.trace_of(0).action_counts().get("oom") == len(said["failures"])


def test_code_that_never_names_cuda_counts_every_tensor_and_says_so(tmp_path):
    script = tmp_path / "cpu.py"
    script.write_text("import torch\nkeep = torch.empty(3 * 1024 * 1024, dtype=torch.uint8)\n")
    path = str(tmp_path / "cpu.pickle")
    proc = subprocess.run([FRAGVIZ, "capture", "--out", path, "--", "python", str(script)], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert load_snapshot(path).provenance["placement"] == "every tensor"
    assert any("every tensor of a CPU run" in w for w in analyze(load_snapshot(path)).warnings)
    assert figures(path).peak_allocated_bytes == 3 * MiB


PLUGIN_TEST = '''
import json
import os

import pytest
import torch

from model import build


@pytest.mark.memory_budget(peak_allocated="{limit}")
def test_step():
    model = build().cuda()
    host = torch.randn(1024, 1024)  # 4 MiB on the host: not the GPU's
    x = torch.randn(64, 512, device="cuda")
    model(x).sum().backward()
    with open(os.environ["SAID"], "w") as fh:
        json.dump({{"max_memory_allocated": torch.cuda.max_memory_allocated(),
                    "device": str(next(model.parameters()).device)}}, fh)
'''


def plugin_project(tmp_path, limit: str):
    (tmp_path / "model.py").write_text("from torch import nn\n\ndef build():\n    return nn.Sequential("
                                       "nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))\n")
    (tmp_path / "test_step.py").write_text(PLUGIN_TEST.format(limit=limit))
    (tmp_path / "pytest.ini").write_text("[pytest]\nmemory_device = simulated\nmemory_baseline = baselines\n")


def run_pytest(tmp_path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "SAID": str(tmp_path / "said.json")}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600, env=env)


def test_the_pytest_plugin_gates_cuda_code_with_the_figures_the_test_saw(tmp_path):
    plugin_project(tmp_path, "8MiB")
    proc = run_pytest(tmp_path, "--memory-update-baseline")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    said = json.loads((tmp_path / "said.json").read_text())
    assert said["device"] == "cuda:0"
    baseline = json.loads(next((tmp_path / "baselines").iterdir()).read_text())
    assert baseline["devices"][0]["peak_allocated_bytes"] == said["max_memory_allocated"]
    assert said["max_memory_allocated"] < 4 * MiB  # the host tensor is not device memory
    plugin_project(tmp_path, "1MiB")  # the same code under a budget it breaks
    proc = run_pytest(tmp_path)
    assert proc.returncode == 1 and "Peak allocated" in proc.stdout, proc.stdout


RUN_JOB = """
import json, sys, torch
weights = torch.empty(1024, 1024, device="cuda")  # 4 MiB on the device
host = torch.empty(8 * 1024 * 1024, dtype=torch.uint8)  # 8 MiB on the host
print(json.dumps({"memory_allocated": torch.cuda.memory_allocated()}), flush=True)
sys.stdin.readline()
"""


def test_fragviz_run_serves_the_figures_the_job_sees(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(RUN_JOB)
    proc = subprocess.Popen([FRAGVIZ, "run", "--port", "0", "--", "python", str(script)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    err: list[str] = []
    threading.Thread(target=lambda: err.extend(iter(proc.stderr.readline, "")), daemon=True).start()
    try:
        said = json.loads(proc.stdout.readline())
        port = wait_for(lambda: re.search(r"on http://127\.0\.0\.1:(\d+)", "".join(err)), "the agent's line",
                        120).group(1)
        stats = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/stats", timeout=30).read())
        device = stats["devices"][0]
        assert said["memory_allocated"] == device["allocated_bytes"] == 4 * MiB
    finally:
        proc.stdin.close()
        assert proc.wait(120) == 0, "".join(err)


def test_asking_for_cuda_where_torch_sees_none_cannot_be_judged_in_one_line(tmp_path):
    plugin_project(tmp_path, "8MiB")
    proc = run_pytest(tmp_path, "--memory-device=cuda", "--memory-update-baseline")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert re.search(r"memory budget cannot be judged: memory device cuda: torch \S+ \(built without CUDA\) sees no "
                     r"CUDA device; record on fragviz's simulated device instead", proc.stdout), proc.stdout
    assert "Traceback" not in proc.stdout
