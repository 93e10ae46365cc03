"""The doctor page in a real browser against a real server: paste a real memory_summary() table, an OOM message,
or nothing readable, alone or with a stored snapshot."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.support.server import Server
from tests.support.helpers import REAL, MiB, block, ev, segment, snapshot, write_pickle

FRAGVIZ = os.path.join(os.path.dirname(sys.executable), "fragviz")
SAMPLES_MD = open(os.path.join(REAL, "text", "memory_summary_samples.md"), encoding="utf-8").read()


def sample(n: int) -> str:
    return SAMPLES_MD.split(f"## Sample {n}:")[1].split("```")[1].strip("\n")


@pytest.fixture(scope="module")
def doctor_server(tmp_path_factory):
    """A server over a store holding one hand-made snapshot: device 0, a 20 MiB segment with a live 12 MiB block
    and a free 8 MiB one."""
    folder = tmp_path_factory.mktemp("doctor")
    seg = segment(0x7F0000000000, [block(0x7F0000000000, 12 * MiB), block(0x7F0000C00000, 8 * MiB, "inactive")])
    path = write_pickle(str(folder / "small.pickle"), snapshot(
        [seg], [ev("segment_alloc", 0x7F0000000000, 20 * MiB), ev("alloc", 0x7F0000000000, 12 * MiB)]))
    db = str(folder / "store.sqlite")
    subprocess.run([FRAGVIZ, "ingest", "--db", db, path], check=True, capture_output=True, timeout=300)
    srv = Server(db, samples=False)
    yield srv
    srv.stop()


def diagnose(page, text: str) -> str:
    """Paste `text`, run the doctor and return its new result: the wait is for a result other than the one
    shown before the click, so a second diagnosis on one page never reads the first one's text."""
    page.wait_for_selector("#doctor-run")
    before = page.locator("#doctor-result").inner_text().strip()
    page.fill("#doctor-paste", text)
    page.click("#doctor-run")
    page.wait_for_function("(before) => { const t = document.querySelector('#doctor-result').innerText.trim();"
                           " return t.length > 0 && t !== before; }", arg=before, timeout=60000)
    return page.locator("#doctor-result").inner_text()


def figure_row(page, key: str) -> str:
    return page.locator(f"#doctor-result tr[data-figure={key}]").inner_text()


def test_paste_sample_2_from_the_header_link(page, doctor_server):
    page.goto(doctor_server.url + "/")
    page.click("header nav >> text=Doctor")
    page.wait_for_url("**/doctor")
    text = diagnose(page, sample(2))
    assert "memory_summary() of device 0: Healthy" in text
    # read off the table: reserved 5684 MiB now = 5.55 GiB, 5868 MiB at peak = 5.73 GiB;
    # non-releasable 60505 KiB = 59.09 MiB, 376319 KiB = 367.50 MiB
    assert re.search(r"5\.55 GiB\s+5\.73 GiB", figure_row(page, "reserved_bytes"))
    assert re.search(r"59\.09 MiB\s+367\.50 MiB", figure_row(page, "inactive_split_bytes"))
    assert re.search(r"5\.31 GiB\s+5\.34 GiB", figure_row(page, "requested_bytes"))  # 5434 and 5464 MiB
    assert figure_row(page, "num_ooms").split() == ["OOMs", "0"]
    assert "59.09 MiB now, 1.0% of the 5.55 GiB reserved" in text
    assert "Nothing to fix" in text
    assert page.errors == []


def test_a_log_with_ooms_and_a_large_stranded_share_gets_fragmentation_advice(page, doctor_server):
    page.goto(doctor_server.url + "/doctor")
    table = re.sub(r"CUDA OOMs: 0\s+\|\s+cudaMalloc retries: 0", "CUDA OOMs: 2            |        cudaMalloc retries: 5",
                   sample(1))
    text = diagnose(page, "\n".join(f"2024-05-01 12:00:01 INFO {line}" for line in table.splitlines()))
    # 619115 KB (1024-based) of 5176 MB reserved = 11.7 %, with OOMs: fragmentation
    assert "Fragmentation" in text and "11.7% of the 5.05 GiB reserved" in text
    assert "Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in text
    assert figure_row(page, "num_alloc_retries").split() == ["cudaMalloc", "retries", "5"]
    assert page.errors == []


def test_bad_input_shows_one_line(page, doctor_server):
    page.goto(doctor_server.url + "/doctor")
    text = diagnose(page, "hello, nothing to read here")
    assert text.strip() == "Cannot show this: the paste: no torch.cuda.memory_summary() table found"
    assert page.locator("#doctor-result .fv-error").count() == 1
    assert page.errors == []


def test_a_message_alone_is_diagnosed(page, doctor_server):
    page.goto(doctor_server.url + "/doctor")
    # 60 MiB cached + 20 MiB free against 2 GiB asked for: exhaustion
    text = diagnose(page, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
                          "capacity of 5.75 GiB of which 20.00 MiB is free. Of the allocated memory 5.50 GiB is "
                          "allocated by PyTorch, and 60.00 MiB is reserved by PyTorch but unallocated.")
    assert "OOM (the message): Exhaustion" in text
    assert page.errors == []


def test_with_a_stored_snapshot(page, doctor_server):
    sid = doctor_server.get_json("/api/snapshots")[0]["id"]
    page.goto(f"{doctor_server.url}/doctor?snapshot={sid}")
    page.wait_for_selector("text=Read with snapshot")
    table = ("|                  PyTorch CUDA memory summary, device ID 0                 |\n"
             "|            CUDA OOMs: 0            |        cudaMalloc retries: 0         |\n"
             "| Active memory         |  12288 KiB |  12288 KiB |  12288 KiB |      0 B   |\n"
             "| GPU reserved memory   |  20480 KiB |  20480 KiB |  20480 KiB |      0 B   |\n")
    text = diagnose(page, table)
    assert "its 8.00 MiB of free cached blocks lie in 1 piece(s), the largest 8.00 MiB" in text
    text = diagnose(page, table.replace("device ID 0", "device ID 3"))
    assert "The table is for device 3; the snapshot has device(s) 0" in text
    page.goto(f"{doctor_server.url}/doctor?snapshot=999")
    page.wait_for_selector(".fv-error")
    assert "999" in page.locator(".fv-error").inner_text()
    assert page.errors == []
