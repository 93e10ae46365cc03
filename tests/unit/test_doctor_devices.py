"""The doctor with a snapshot of several devices and a message: the message's GPU (or, where it names none, its
figures) picks the device, the diagnosis says which device's state it read, and another device's state is never
lent to a message (a DeviceMismatch where the caller asks for strictness, as the CLI does)."""
from __future__ import annotations

import pickle

import pytest

from fragviz.replay.analysis import analyze
from fragviz.doctor import diagnose, diagnose_message_with
from fragviz.doctor.together import DeviceMismatch
from fragviz.snapshot import load_snapshot_bytes
from tests.support.helpers import block, ev, segment, snapshot

MiB = 1024 * 1024
A, B, C = 0x7F0000000000, 0x7F0010000000, 0x7E0000000000


def two_devices():
    """Device 0: one 100 MiB segment, 60 MiB live, no OOM. Device 1: two 100 MiB segments with 60 MiB live in each,
    then a 45 MiB request fails (its message asks for the 46 MiB segment)."""
    dev0 = [segment(C, [block(C, 60 * MiB), block(C + 60 * MiB, 40 * MiB, "inactive", 0)], device=0)]
    dev1 = [segment(A, [block(A, 60 * MiB), block(A + 60 * MiB, 40 * MiB, "inactive", 0)], device=1),
            segment(B, [block(B, 60 * MiB), block(B + 60 * MiB, 40 * MiB, "inactive", 0)], device=1)]
    trace0 = [ev("segment_alloc", C, 100 * MiB), ev("alloc", C, 60 * MiB)]
    trace1 = [ev("segment_alloc", A, 100 * MiB), ev("alloc", A, 100 * MiB), ev("segment_alloc", B, 100 * MiB),
              ev("alloc", B, 100 * MiB), ev("free_requested", A, 100 * MiB), ev("free_completed", A, 100 * MiB),
              ev("free_requested", B, 100 * MiB), ev("free_completed", B, 100 * MiB), ev("alloc", A, 60 * MiB),
              ev("alloc", B, 60 * MiB), {"action": "oom", "device_free": 0, "size": 45 * MiB, "stream": 0}]
    data = snapshot(dev0 + dev1, trace0, trace1)
    return analyze(load_snapshot_bytes(pickle.dumps(data), "two.pickle"))


def modern(request: str, gpu: int) -> str:
    return (f"CUDA out of memory. Tried to allocate {request}. GPU {gpu} has a total capacity of 1.00 GiB of which 0 "
            "bytes is free. Of the allocated memory 120.00 MiB is allocated by PyTorch, and 80.00 MiB is reserved by "
            "PyTorch but unallocated.")


def message_diagnosis(analysis, text, **kw):
    return [d for d in diagnose(analysis, text, simulate=False, **kw) if d.event is None]


def test_the_messages_gpu_picks_the_device_and_the_diagnosis_says_so():
    (d,) = message_diagnosis(two_devices(), modern("46.00 MiB", 1))
    assert d.device == 1 and d.largest_free_block == 40 * MiB and d.warnings == ()
    assert d.notes[0] == "Read with the snapshot's device 1 state (the message's GPU 1)."


def test_a_message_of_one_device_is_not_read_with_another_devices_oom():
    a = two_devices()
    why = ("the message names GPU 0, but what it asked for (46.00 MiB) is the OOM the snapshot records on device 1 "
           "(event 10), and device 0 records no such OOM")
    (d,) = message_diagnosis(a, modern("46.00 MiB", 0))
    assert d.largest_free_block is None and d.warnings[0] == (
        f"The message and the snapshot cannot be the same run: {why}. The message is diagnosed from its own figures; "
        "the snapshot's are not used.")
    with pytest.raises(DeviceMismatch) as refused:
        message_diagnosis(a, modern("46.00 MiB", 0), strict_device=True)
    assert str(refused.value) == (f"a message is not read with another device's state: {why}. Pass the "
                                  "snapshot of the message's device, or leave out the snapshot to diagnose the message "
                                  "alone.")
    assert "\n" not in str(refused.value)


def test_a_gpu_the_snapshot_does_not_hold_is_refused():
    with pytest.raises(DeviceMismatch, match="the message is about GPU 5, and the snapshot holds only device"
                                             r"\(s\) 0, 1"):
        message_diagnosis(two_devices(), modern("46.00 MiB", 5), strict_device=True)


def test_no_oom_on_the_messages_device_names_the_oom_on_the_other():
    (d,) = message_diagnosis(two_devices(), modern("300.00 MiB", 0))
    assert d.device == 0
    assert d.warnings == ("The largest free block is device 0's final state's: the snapshot records no OOM on "
                          "device 0 (it records 1 on device 1), so device 0's state at the moment of the message is "
                          "not known.",)
    assert not any("the snapshot records no OOM," in w for w in d.warnings)


def test_a_message_naming_no_gpu_is_matched_by_its_figures_or_read_alone():
    a = two_devices()
    no_gpu = ("CUDA out of memory. Tried to allocate 46.00 MiB. Of the allocated memory 120.00 MiB is allocated by "
              "PyTorch, and 80.00 MiB is reserved by PyTorch but unallocated.")
    (d,) = message_diagnosis(a, no_gpu)
    assert d.device == 1 and d.largest_free_block == 40 * MiB
    assert d.notes[0] == ("Read with the snapshot's device 1 state (the message names no GPU; its figures match "
                          "device 1's recorded OOM (event 10)).")
    (alone,) = message_diagnosis(a, "RuntimeError: CUDA error: out of memory")
    assert alone.warnings[0] == ("The snapshot's state is not read with the message: the message names no GPU, and "
                                 "the snapshot holds devices 0, 1 with no recorded OOM its figures match. The "
                                 "message is diagnosed from its own figures.")


def test_the_doctor_page_reading_lends_no_other_devices_state_either():
    (d,) = diagnose_message_with(two_devices(), modern("46.00 MiB", 0))
    assert d.largest_free_block is None and "device 1 (event 10)" in d.warnings[0]
