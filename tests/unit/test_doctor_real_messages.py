"""The doctor on real OOM messages pasted in public GitHub issues (tests/data/oom_messages_real.json): each with
its source, the text as pasted (prefixes, wraps, HTML escapes and all), and its figures and verdict worked out by
hand from the message's own numbers (the entry's `worked`). Every PyTorch era, ROCm and cudaMallocAsync too.

The figures are checked against the printed strings converted here, independently of fragviz's parser.
"""
from __future__ import annotations

import json
import os
import re

import pytest

from fragviz.doctor import diagnose_message
from fragviz.doctor.message import find_messages, parse_message

HERE = os.path.dirname(os.path.abspath(__file__))
ENTRIES = json.load(open(os.path.join(HERE, "..", "data", "oom_messages_real.json"), encoding="utf-8"))
UNITS = {"bytes": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
VERDICTS = {"exhaustion", "fragmentation", "outside_pytorch", "capacity_cap", "undetermined"}
# The failure classes of issue 20 (and the forms around them) that the set must hold, each at least once.
CLASSES = {"wrapped-at-words", "wrapped-mid-word", "html-escaped", "double-space", "log-prefix", "rank-prefix",
           "rocm", "cap", "limit-caps-nothing", "co-tenant", "others-hold-most", "others-hold-gib",
           "cache-covers-with-outside", "other-processes", "job-own-process", "inconsistent", "request-above-device",
           "legacy-1.0", "legacy-1.5", "2.1-capacty", "cudaMallocAsync", "bare-second-sentence", "gpu-n", "repeated"}
WARNING_KINDS = {"inconsistent": "cannot all be true of one device", "unread": "Could not read"}


def size(printed: str) -> int:
    number, unit = printed.split()
    return int(round(float(number) * UNITS[unit]))


def ids(entries: list[dict]) -> list[str]:
    return [e["id"] for e in entries]


def test_the_set_is_real_varied_and_covers_every_class():
    assert len(ENTRIES) >= 30
    assert len(set(ids(ENTRIES))) == len(ENTRIES)
    for e in ENTRIES:
        assert re.match(r"https://github\.com/[\w.-]+/[\w.-]+/(issues|pull)/\d+$", e["source"]), e["id"]
        assert e["worked"] and e["expected"]["verdict"] in VERDICTS
    seen = {c for e in ENTRIES for c in e["classes"]}
    assert CLASSES <= seen, CLASSES - seen
    verdicts = {e["expected"]["verdict"] for e in ENTRIES}
    assert verdicts == VERDICTS
    assert {e["expected"]["vendor"] for e in ENTRIES} == {"CUDA", "HIP"}
    assert {e["expected"]["era"] for e in ENTRIES} == {"1.0", "1.5", "2.1+", "async"}


@pytest.mark.parametrize("e", ENTRIES, ids=ids(ENTRIES))
def test_the_messages_are_found_once_each(e):
    found = find_messages(e["text"])
    assert len(found) == e["expected"]["messages"]
    assert all("\n" not in m and "  " not in m for m in found)  # one line each, whitespace collapsed
    assert find_messages("\n".join(found)) == found  # what the doctor page and --summary pass on reads back the same


@pytest.mark.parametrize("e", ENTRIES, ids=ids(ENTRIES))
def test_the_figures_are_read(e):
    want = e["expected"]
    msg = parse_message(find_messages(e["text"])[0])
    assert (msg.era, msg.vendor, msg.device) == (want["era"], want["vendor"], want["device"])
    figures = want["figures"]
    for key in ("requested", "total", "free", "allocated", "allowed", "private_pools", "this_process"):
        assert getattr(msg, key) == (size(figures[key]) if key in figures else None), key
    parts = [figures.get(k) for k in ("unallocated", "cached") if k in figures]
    reserved = size(figures["reserved"]) if "reserved" in figures else (
        size(figures["allocated"]) + size(parts[0]) if parts else None)
    assert msg.reserved == reserved
    assert [(p.pid, p.bytes, p.own) for p in msg.processes] == [
        (p["pid"], size(p["size"]), p["own"]) for p in want["processes"]]
    assert msg.unread == ()


@pytest.mark.parametrize("e", ENTRIES, ids=ids(ENTRIES))
def test_the_verdict_is_the_one_worked_out_by_hand(e):
    want = e["expected"]
    d = diagnose_message(e["text"])[0]
    assert d.verdict == want["verdict"], e["worked"]
    kinds = {k for k, phrase in WARNING_KINDS.items() if any(phrase in w for w in d.warnings)}
    assert kinds == set(want["warnings"]), d.warnings
    assert d.advice and all(isinstance(a, str) and a for a in d.advice)


@pytest.mark.parametrize("e", ENTRIES, ids=ids(ENTRIES))
def test_the_advice_can_help(e):
    """Other processes are named by pid and size and the job's own is never offered for stopping; a memory fraction
    is offered only where one limits; fragmentation gets the allocator's fixes, never 'outside PyTorch'."""
    d = diagnose_message(e["text"])[0]
    text = " ".join(d.advice)
    own = [p for p in e["expected"]["processes"] if p["own"]]
    others = [p for p in e["expected"]["processes"] if not p["own"]]
    for p in own:
        assert not any(f"process {p['pid']}" in a and "Stop them" in a for a in d.advice)
    if d.verdict == "outside_pytorch":
        for p in others:
            assert f"process {p['pid']} ({p['size']})" in text
    if d.verdict == "fragmentation":
        assert "expandable_segments" in text and "used outside PyTorch's allocator" not in text
    if "allowed" not in e["expected"]["figures"] or "limit-caps-nothing" in e["classes"]:
        assert "Raise or remove torch.cuda.set_per_process_memory_fraction" not in text
    if d.verdict == "capacity_cap" and "allowed" in e["expected"]["figures"]:
        assert "set_per_process_memory_fraction" in text


# -- variants of real messages, made to check a class that no real paste in the set shows --------------------------

def real(entry_id: str) -> str:
    return next(e["text"] for e in ENTRIES if e["id"] == entry_id)


def test_a_lower_case_pytorch_still_gives_the_reserved_figure():
    # a paste retyped as "reserved in total by Pytorch" (no such real paste was found to add to the set)
    text = real("AP-PA-3").replace("by PyTorch", "by Pytorch")
    assert "by Pytorch)" in text
    (d,) = diagnose_message(text)
    assert d.reserved_bytes == size("19.00 GiB") and d.verdict == "fragmentation"
    assert diagnose_message(text.upper())[0].reserved_bytes == size("19.00 GiB")


def test_a_memory_fraction_equal_to_the_device_caps_nothing():
    # TheRock-2118 with its fraction set to 1.0: "255.98 GiB allowed" on a 255.98 GiB device
    text = real("TheRock-2118").replace("1.05 GiB allowed", "255.98 GiB allowed")
    (d,) = diagnose_message(text)
    assert d.verdict != "capacity_cap" or "Raise or remove" not in " ".join(d.advice)
    assert not any("set_per_process_memory_fraction" in a and "Raise" in a for a in d.advice)
    assert any("caps nothing" in n for n in d.notes)


def test_a_message_wrapped_with_a_prefix_on_every_line():
    # PR 99699's wrapped message as a distributed job logs it: "[rank3]: " before every line, HTML-escaped
    lines = real("pytorch-pr-99699").strip('"\n').split("\n")
    text = "\n".join(f"[rank3]: {line}" for line in lines).replace("'", "&#39;").replace(">", "&gt;")
    (d,) = diagnose_message(text)
    assert d.verdict == "fragmentation" and d.warnings == ()
    assert d.reserved_bytes == size("14.12 GiB") + size("410.41 MiB")
    pytest_style = "\n".join("E   " + line for line in lines)
    assert diagnose_message(pytest_style)[0].reserved_bytes == d.reserved_bytes


def test_a_cut_message_says_what_could_not_be_read_and_gives_no_verdict():
    cut = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 312.00 MiB. GPU"
    (d,) = diagnose_message(cut)
    assert d.verdict == "undetermined"
    (warning,) = d.warnings
    assert warning.startswith("Could not read ") and "so the figures read do not tell the cause" in warning
    for name in ("the GPU number", "the device total", "the device's free memory", "the memory allocated by PyTorch",
                 "the memory reserved by PyTorch"):
        assert name in warning
    # only the request and the total: no confident verdict either
    two = "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which"
    assert diagnose_message(two)[0].verdict == "undetermined"


def test_a_pid_the_user_gives_is_the_job_itself():
    text = real("FireRedTTS2-17")
    (d,) = diagnose_message(text, job_pid=1493972)
    assert [(p.pid, p.own) for p in d.processes] == [(3893521, False), (1493972, True)]
