"""`fragviz doctor --summary FILE|-` run as a user runs it: the real command in a subprocess, on the real
tables of real_snapshots/text/memory_summary_samples.md, alone and with a snapshot or an OOM message."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from tests.support.helpers import REAL, block, ev, segment, snapshot, write_pickle

FRAGVIZ = os.path.join(os.path.dirname(sys.executable), "fragviz")
KiB, MiB = 1024, 1024**2
SAMPLES_MD = open(os.path.join(REAL, "text", "memory_summary_samples.md"), encoding="utf-8").read()


def sample(n: int) -> str:
    return SAMPLES_MD.split(f"## Sample {n}:")[1].split("```")[1].strip("\n") + "\n"


def doctor(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([FRAGVIZ, "doctor", *args], input=stdin, capture_output=True, text=True, timeout=300)


def write(tmp_path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_a_table_file_gives_its_figures_verdict_and_advice(tmp_path):
    proc = doctor("--summary", write(tmp_path, "s2.txt", sample(2)))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.splitlines()[0].endswith("s2.txt: torch.cuda.memory_summary() of device 0: healthy")
    # 5684 MiB = 5.55 GiB now, 5868 MiB = 5.73 GiB at peak; 60505 KiB = 59.09 MiB, 376319 KiB = 367.50 MiB
    assert re.search(r"reserved\s+5\.55 GiB\s+5\.73 GiB", out)
    assert re.search(r"non-releasable\s+59\.09 MiB\s+367\.50 MiB", out)
    assert "OOMs: 0" in out and "cudaMalloc retries: 0" in out
    assert "Nothing to fix" in out


def test_standard_input_with_log_prefixes_and_json(tmp_path):
    pasted = "".join(f"[rank0]: {line}\n" for line in sample(1).splitlines())
    proc = doctor("--summary", "-", "--json", stdin=pasted)
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)
    assert set(d) == {"source", "summary", "verdict", "findings", "advice", "disagreements", "ooms"}
    assert d["source"] == "<stdin>" and d["verdict"] == "no_oom"
    s = d["summary"]
    assert s["reserved_bytes"]["all"]["current"] == 5176 * MiB
    assert s["inactive_split_bytes"]["all"]["current"] == 619115 * KiB  # the old table's KB is 1024 bytes
    assert s["allocated_bytes"]["small_pool"]["current"] == 39568 * KiB
    assert s["requested_bytes"] is None and s["unit_style"] == "KB"
    assert (s["device"], s["num_ooms"], s["num_alloc_retries"]) == (0, 0, 0)
    assert d["disagreements"] == [] and d["ooms"] == []
    assert any("11.7% of the 5.05 GiB reserved" in f for f in d["findings"])  # 619115 KiB / 5176 MiB


def test_with_a_message_that_disagrees(tmp_path):
    message = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 158.00 MiB. GPU 1 has a total capacity "
               "of 23.69 GiB of which 115.69 MiB is free. Of the allocated memory 22.14 GiB is allocated by PyTorch, "
               "and 910.35 MiB is reserved by PyTorch but unallocated.")
    proc = doctor("--summary", write(tmp_path, "s2.txt", sample(2)), "--message", message, "--json")
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)
    assert d["disagreements"] == ["The table is for device 0, the OOM message for GPU 1: their figures are not "
                                  "combined."]
    assert d["verdict"] == "healthy"
    assert len(d["ooms"]) == 1 and d["ooms"][0]["requested_bytes"] == 158 * MiB


def test_an_oom_message_in_the_same_log_is_read_too(tmp_path):
    table = sample(2).replace("CUDA OOMs: 0 ", "CUDA OOMs: 1 ")
    message = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
               "of 5.75 GiB of which 20.00 MiB is free. Of the allocated memory 5.50 GiB is allocated by PyTorch, "
               "and 60.00 MiB is reserved by PyTorch but unallocated.")
    proc = doctor("--summary", write(tmp_path, "log.txt", "Traceback ...\n" + message + "\n" + table), "--json")
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)
    # 60 MiB cached + 20 MiB free against 2 GiB asked for: exhaustion, and the message agrees with the table
    assert d["disagreements"] == [] and d["verdict"] == "exhaustion"
    assert [o["verdict"] for o in d["ooms"]] == ["exhaustion"]


def test_of_several_tables_the_one_of_the_messages_device_is_read(tmp_path):
    log = (sample(2) + "step 2\n" + sample(3).replace("device ID 0", "device ID 1")
           + "step 3\n" + sample(1).replace("device ID 0", "device ID 2"))
    message = ("CUDA out of memory. Tried to allocate 20.00 MiB (GPU 1; 15.90 GiB total capacity; 13.99 GiB already "
               "allocated; 5.00 MiB free; 14.24 GiB reserved in total by PyTorch)")
    proc = doctor("--summary", write(tmp_path, "log.txt", log), "--message", message, "--json")
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)
    s = d["summary"]
    assert (s["device"], s["table"], s["tables"]) == (1, 2, 3)
    assert s["reserved_bytes"]["all"]["current"] == 14586 * MiB  # sample 3's figure
    assert d["findings"][0].startswith("Table 2 of the 3 in the text, device 1")
    proc = doctor("--summary", write(tmp_path, "log.txt", log), "--json")  # no message: the last table
    assert json.loads(proc.stdout)["summary"]["device"] == 2


def test_with_a_snapshot_of_the_same_moment_and_of_another_device(tmp_path):
    seg = segment(0x7F0000000000, [block(0x7F0000000000, 12 * MiB), block(0x7F0000C00000, 8 * MiB, "inactive")])
    snap = write_pickle(str(tmp_path / "snap.pickle"), snapshot(
        [seg], [ev("segment_alloc", 0x7F0000000000, 20 * MiB), ev("alloc", 0x7F0000000000, 12 * MiB)]))
    table = ("|                  PyTorch CUDA memory summary, device ID 0                 |\n"
             "|            CUDA OOMs: 0            |        cudaMalloc retries: 0         |\n"
             "| Active memory         |  12288 KiB |  12288 KiB |  12288 KiB |      0 B   |\n"
             "| GPU reserved memory   |  20480 KiB |  20480 KiB |  20480 KiB |      0 B   |\n")
    proc = doctor(snap, "--summary", write(tmp_path, "t.txt", table), "--json")
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)
    assert d["disagreements"] == []
    assert any("largest 8.00 MiB" in f for f in d["findings"])
    proc = doctor(snap, "--summary", write(tmp_path, "t1.txt", table.replace("device ID 0", "device ID 1")))
    assert proc.returncode == 0, proc.stderr
    assert "The table is for device 1; the snapshot has device(s) 0" in proc.stdout


def test_a_real_snapshot_with_a_table_of_another_run(tmp_path):
    # selectn_dev1_notrace holds device 1 only; sample 2 is a table of device 0
    proc = doctor(os.path.join(REAL, "selectn_dev1_notrace.pickle"), "--summary", write(tmp_path, "s2.txt", sample(2)),
                  "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["disagreements"] == [
        "The table is for device 0; the snapshot has device(s) 1: their figures are not combined."]


def test_bad_input_is_one_line_and_status_2(tmp_path):
    proc = doctor("--summary", write(tmp_path, "notes.txt", "no table here\n"))
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == f"fragviz: {tmp_path / 'notes.txt'}: no torch.cuda.memory_summary() table found\n"
    proc = doctor("--summary", "-", stdin="x" * (4 * MiB + 10))
    assert proc.returncode == 2 and proc.stderr.startswith("fragviz: <stdin>: more than 4 MiB")
    assert proc.stderr.count("\n") == 1
    proc = doctor("--summary", str(tmp_path / "missing.txt"))
    assert proc.returncode == 2 and proc.stderr.startswith(f"fragviz: {tmp_path / 'missing.txt'}: cannot be read")
    proc = doctor("--summary", write(tmp_path, "s2.txt", sample(2)), "--message", "all is well")
    assert proc.returncode == 2 and "--message holds no CUDA out-of-memory message" in proc.stderr


def test_doctor_with_nothing_to_read_says_what_it_needs():
    proc = doctor()
    assert proc.returncode == 2
    assert proc.stderr == "fragviz: doctor needs a snapshot (FILE_OR_ID), --message TEXT or --summary FILE\n"
