"""`fragviz doctor` and `fragviz simulate` as a user runs them, on a real two-device snapshot and real pasted
messages: the message's GPU picks the device and the output says so; a message about another GPU is refused in
one line; with --json every refusal is JSON too; simulate says when a single request is larger than the device."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.support.helpers import REAL

FRAGVIZ = os.path.join(os.path.dirname(sys.executable), "fragviz")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TWO = os.path.join(REAL, "layoutedit_dump_2dev.pickle")  # devices 0 and 1, no recorded OOM
FRAG_SAMPLE = os.path.join(ROOT, "sample_snapshots", "gpt_train_fragmentation_oom.pickle.gz")
REAL_MESSAGES = json.load(open(os.path.join(ROOT, "tests", "data", "oom_messages_real.json"), encoding="utf-8"))


def fragviz(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([FRAGVIZ, *args], capture_output=True, text=True, timeout=300)


def message(gpu: int) -> str:
    return (f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU {gpu} has a total capacity "
            "of 23.65 GiB of which 10.00 MiB is free. Of the allocated memory 20.00 GiB is allocated by PyTorch, and "
            "1.00 GiB is reserved by PyTorch but unallocated.")


def test_the_messages_gpu_picks_the_device_of_a_real_two_device_snapshot():
    out = fragviz("doctor", TWO, "--message", message(1), "--no-simulate", "--json")
    assert out.returncode == 0, out.stderr
    (oom,) = json.loads(out.stdout)["ooms"]
    assert oom["device"] == 1 and oom["notes"][0] == "Read with the snapshot's device 1 state (the message's GPU 1)."
    assert oom["warnings"] == ["The largest free block is the snapshot's final state's: the snapshot records no OOM, "
                               "so its state at the moment of the message is not known."]
    text = fragviz("doctor", TWO, "--message", message(1), "--no-simulate").stdout.splitlines()
    assert text[0] == "OOM 1: fragmentation"
    assert "  note: Read with the snapshot's device 1 state (the message's GPU 1)." in text


def test_a_message_about_another_gpu_is_refused_in_one_line_and_in_json():
    out = fragviz("doctor", TWO, "--message", message(3), "--no-simulate")
    why = ("a message is not read with another device's state: the message is about GPU 3, and the snapshot holds only "
           "device(s) 0, 1. Pass the snapshot of the message's device, or leave out the snapshot to diagnose the "
           "message alone.")
    assert (out.returncode, out.stdout, out.stderr) == (2, "", f"fragviz: {why}\n")
    as_json = fragviz("doctor", TWO, "--message", message(3), "--no-simulate", "--json")
    assert as_json.returncode == 2 and as_json.stderr == ""
    assert json.loads(as_json.stdout) == {"error": why, "exit_status": 2}


def test_every_doctor_refusal_is_json_with_json():
    for args in (("--message", "all good"), (), ("--summary", os.path.join(ROOT, "no-such-file.txt"))):
        out = fragviz("doctor", *args, "--json")
        assert out.returncode == 2 and out.stderr == "", args
        refusal = json.loads(out.stdout)
        assert set(refusal) == {"error", "exit_status"} and refusal["exit_status"] == 2 and refusal["error"]
    plain = fragviz("doctor", "--message", "all good")
    assert plain.returncode == 2 and "no CUDA out-of-memory message" in plain.stderr and plain.stdout == ""


def test_a_wrapped_real_message_through_the_cli():
    entry = next(e for e in REAL_MESSAGES if e["id"] == "pytorch-129632")
    out = fragviz("doctor", "--message", entry["text"], "--json")
    (oom,) = json.loads(out.stdout)["ooms"]
    assert oom["verdict"] == "exhaustion" and oom["device_total_bytes"] == round(79.35 * 2**30)
    assert oom["processes"] == [{"pid": 3456282, "bytes": round(969.00 * 2**20), "own": True}]
    named = fragviz("doctor", "--message", next(e["text"] for e in REAL_MESSAGES if e["id"] == "horovod-2719"))
    assert "OOM 1: memory outside PyTorch" in named.stdout and "process" not in named.stdout.split("\n")[0]


def test_simulate_says_an_oom_is_certain_when_one_request_is_larger_than_the_device():
    out = fragviz("simulate", FRAG_SAMPLE, "--alloc-conf", "expandable_segments:True", "--device-memory", "60MiB")
    assert out.returncode == 0, out.stderr
    assert ("  => an OOM is certain: the request at event 7900 (90.00 MiB) alone is larger than the device's "
            "60.00 MiB, whatever the allocator settings") in out.stdout.splitlines()
    as_json = json.loads(fragviz("simulate", FRAG_SAMPLE, "--device-memory", "60MiB", "--json").stdout)
    assert as_json["devices"][0]["certain_oom"] == {"event": 7900, "request_bytes": 90 * 2**20,
                                                    "device_memory_bytes": 60 * 2**20}
    roomy = json.loads(fragviz("simulate", FRAG_SAMPLE, "--device-memory", "1GiB", "--json").stdout)
    assert roomy["devices"][0]["certain_oom"] is None
