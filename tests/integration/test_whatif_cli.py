"""`fragviz simulate` and `fragviz doctor` as a user runs them: refusals where there is nothing to simulate, the
inherited start said, the recording next to the simulation, and no claim the simulation did not earn."""
from __future__ import annotations

import gzip
import json
import os
import pickle
import subprocess
import sys

import pytest

from tests.support.helpers import REAL

FRAGVIZ = os.path.join(os.path.dirname(sys.executable), "fragviz")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FRAG_SAMPLE = os.path.join(ROOT, "sample_snapshots", "gpt_train_fragmentation_oom.pickle.gz")
NO_TRACE = {"cs336kk_notrace_75gb": 0, "selectn_dev1_notrace": 1}


def fragviz(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([FRAGVIZ, *args], capture_output=True, text=True, timeout=300)


def real(name: str) -> str:
    return os.path.join(REAL, name + ".pickle")


@pytest.mark.parametrize("name", sorted(NO_TRACE))
@pytest.mark.parametrize("mode", [["--alloc-conf", "expandable_segments:True"], ["--alloc-conf", "", "--json"], []])
def test_simulate_refuses_a_snapshot_without_a_trace(name, mode):
    out = fragviz("simulate", real(name), *mode)
    device = NO_TRACE[name]
    assert out.returncode == 2 and out.stdout == ""  # no figure printed
    (line,) = out.stderr.splitlines()
    what = "nothing to follow" if not mode else "cannot simulate"
    assert line.startswith(f"fragviz: {real(name)}: {what}: device {device} has no trace (memory history was off")


def test_simulate_says_the_start_is_inherited_and_refuses_the_oom_claim():
    out = fragviz("simulate", real("hanmin_train_19k"), "--alloc-conf", "expandable_segments:True")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[1] == "device 0: device size unknown (pass --device-memory SIZE to ask about OOMs)"
    assert lines[2].startswith("  recorded ") and lines[2].endswith(": no OOM")
    assert lines[3].endswith("OOMs not simulated (device size unknown)")
    assert lines[4].endswith("OOMs not simulated (device size unknown)")
    assert lines[5].startswith("  cannot tell: the device size is unknown")
    assert lines[6].startswith("  note: The trace starts mid-run: 999 segments (22.21 GiB reserved) and 1313 live "
                               "blocks")
    assert "no OOM" not in lines[3] + lines[4]  # no simulated OOM claim without a device size


def test_simulate_json_with_a_device_size():
    out = fragviz("simulate", real("hanmin_train_19k"), "--alloc-conf", "expandable_segments:True",
                  "--device-memory", "80GiB", "--json")
    (d,) = json.loads(out.stdout)["devices"]
    assert (d["status"], d["outcome"]) == ("simulated", "no_oom")
    assert d["device_memory"] == {"bytes": 80 * 1024**3, "source": "given"}
    assert d["start"]["segments"] == 999 and d["start"]["inherited"] is True
    small = fragviz("simulate", real("hanmin_train_19k"), "--alloc-conf", "expandable_segments:True",
                    "--device-memory", "20GiB", "--json")
    assert small.returncode == 2 and small.stdout == ""
    assert small.stderr == (f"fragviz: {real('hanmin_train_19k')}: cannot simulate: the trace starts with 22.21 GiB "
                            "already reserved on device 0, more than the 20.00 GiB device asked about: that start "
                            "state cannot exist on it\n")


def test_simulate_sets_the_recorded_oom_beside_the_simulated_runs():
    with gzip.open(FRAG_SAMPLE, "rb") as fh:
        trace = pickle.load(fh)["device_traces"][0]
    (k,) = [i for i, e in enumerate(trace) if e["action"] == "oom"]
    out = fragviz("simulate", FRAG_SAMPLE, "--alloc-conf", "expandable_segments:True")
    lines = out.stdout.splitlines()
    assert lines[1] == "device 0: device size 1.00 GiB (reserved + device free at the first recorded OOM)"
    assert lines[2].startswith("  recorded ") and lines[2].endswith(f"1 OOM(s), the first at event {k} "
                                                                     f"({trace[k]['size'] / 2**20:.2f} MiB requested)")
    assert lines[3].startswith("  simulated, recorded settings ") and f"the first at event {k}" in lines[3]
    assert lines[4].startswith("  simulated, expandable_segments:True ") and lines[4].endswith(
        ": no OOM up to the end of the recording")
    # the recording ends at its OOM: what the program does after it was never recorded, so no "avoids"
    assert lines[5] == (f"  => expandable_segments:True gets past the recorded failure (event {k}): simulated on "
                        "1.00 GiB, no OOM up to the end of the recording; the rest of the run was not recorded, so "
                        "whether it runs out of memory later (the rest of the step, the next steps) cannot be told")


@pytest.mark.parametrize("name", sorted(NO_TRACE))
def test_doctor_cannot_answer_what_ifs_without_a_trace(name):
    device = NO_TRACE[name]
    message = (f"CUDA out of memory. Tried to allocate 512.00 MiB. GPU {device} has a total capacity of 79.10 GiB of "
               "which 10.00 MiB is free. Of the allocated memory 60.00 GiB is allocated by PyTorch, and 2.00 GiB is "
               "reserved by PyTorch but unallocated.")
    out = fragviz("doctor", real(name), "--message", message, "--json")
    (oom,) = json.loads(out.stdout)["ooms"]
    assert oom["warnings"] == ["The largest free block is the snapshot's final state's: the snapshot records no "
                               "OOM, so its state at the moment of the message is not known."]
    assert oom["what_if"]
    for w in oom["what_if"]:
        assert (w["status"], w["avoids_oom"]) == ("cannot_answer", None)
        assert w["reason"].startswith(f"device {device} has no trace")
        assert "peak_reserved_bytes" not in w
    text = fragviz("doctor", real(name), "--message", message).stdout
    assert "what if: expandable_segments:True: cannot answer: device" in text


def test_doctor_warns_when_the_message_is_of_another_run():
    message = ("CUDA out of memory. Tried to allocate 512.00 MiB (GPU 0; 23.69 GiB total capacity; 21.90 GiB already "
               "allocated; 181.06 MiB free; 22.25 GiB reserved in total by PyTorch)")
    with open(real("cs336kk_notrace_75gb"), "rb") as fh:
        reserved = sum(s["total_size"] for s in pickle.load(fh)["segments"])
    out = fragviz("doctor", real("cs336kk_notrace_75gb"), "--message", message)
    assert out.returncode == 0, out.stderr
    assert (f"  warning: The message and the snapshot cannot be the same run: the snapshot reserves up to "
            f"{reserved / 2**30:.2f} GiB on device 0, more than the 23.69 GiB the message's GPU has in all. The message "
            "is diagnosed from its own figures; the snapshot's are not used.") in out.stdout.splitlines()
    assert "OOM 1: true exhaustion" in out.stdout and "what if" not in out.stdout


def test_doctor_what_ifs_stand_next_to_the_recording():
    out = fragviz("doctor", FRAG_SAMPLE, "--json")
    (oom,) = json.loads(out.stdout)["ooms"]
    expandable, split = oom["what_if"]
    assert expandable["alloc_conf"] == "expandable_segments:True" and expandable["outcome"] == "gets_past_recorded_failure"
    assert expandable["avoids_oom"] is None  # the sample ends at its OOM
    assert expandable["recorded"]["ooms"] == 1 and expandable["baseline"]["ooms"] == 1
    assert expandable["recorded"]["peak_reserved_bytes"] == oom["reserved_bytes"]  # the OOM came at the peak
    assert split["outcome"] == "still_ooms" and split["avoids_oom"] is False
    assert any("max_split_size_mb:512 would not help here" in a for a in oom["advice"])


@pytest.mark.parametrize("name, zipped", [("whatif.pickle.gz", True), ("whatif.pickle", False)])
def test_simulate_out_is_gzipped_as_its_name_says(tmp_path, name, zipped):
    path = tmp_path / name
    out = fragviz("simulate", FRAG_SAMPLE, "--alloc-conf", "expandable_segments:True", "--out", str(path))
    assert out.returncode == 0, out.stderr
    data = path.read_bytes()
    assert data[:2] == b"\x1f\x8b" if zipped else data[:1] == b"\x80"  # gzip's magic, else a pickle's protocol byte
    with (gzip.open if zipped else open)(path, "rb") as fh:
        snap = pickle.load(fh)
    assert snap["device_traces"][0] and snap["fragviz_provenance"]["origin"] == "simulated"
    # and fragviz reads it back as the run it simulated
    again = json.loads(fragviz("simulate", str(path), "--json").stdout)["devices"][0]
    assert again["mode"] == "follow" and again["alloc_events"] > 0
