"""The memory_summary() reader on every table of real_snapshots/text/memory_summary_samples.md, and the doctor's
findings from it. Expected figures are read off the tables by hand.

Units: PyTorch's `_format_size` (torch/cuda/memory.py) divides by 1024 per unit step (`sz //= 1024`) in every
version; before 2.0 it labelled the steps "KB", "MB", "GB", from 2.0 on "KiB", "MiB", "GiB". So "146836 KB" in
an old table is 146836 * 1024 bytes, not 146836 * 1000, and every cell is rounded down to its unit.
"""
from __future__ import annotations

import os
import re

import pytest

from fragviz.replay.analysis import analyze
from fragviz.doctor import diagnose_message
from fragviz.doctor.summary import (MAX_SUMMARY_BYTES, Cell, SummaryFormatError, decode, parse_summaries,
                                    parse_summary, read_summary_text)
from fragviz.doctor.summary_text import diagnose_summary
from fragviz.snapshot import load_snapshot
from tests.support.helpers import REAL, block, ev, segment, snapshot, write_pickle

KiB, MiB, GiB = 1024, 1024**2, 1024**3
SAMPLES_MD = open(os.path.join(REAL, "text", "memory_summary_samples.md"), encoding="utf-8").read()


def sample(n: int) -> str:
    """Sample n of the file: the whole table (1-3) or the rows and header lines the file quotes (4-7)."""
    if n <= 3:
        section = SAMPLES_MD.split(f"## Sample {n}:")[1]
        return section.split("```")[1].strip("\n")
    bullet = re.search(rf"- Sample {n},.*?(?=\n- Sample|\Z)", SAMPLES_MD, re.S).group(0)
    return "\n".join(re.findall(r"`(\|[^`]*\|)`", bullet))


def figures(s, metric: str, pool: str = "all") -> tuple:
    return tuple(s.figure(metric, column, pool) for column in ("current", "peak", "allocated", "freed"))


# ---- every sample, figure by figure ----------------------------------------------------------------------

def test_sample_1_old_format_kb_is_1024_bytes():
    (s,) = parse_summaries(sample(1), "sample 1")
    assert (s.device, s.num_ooms, s.num_alloc_retries, s.unit_style) == (0, 0, 0, "KB")
    assert figures(s, "allocated_bytes") == (146836 * KiB, 4261 * MiB, 847 * GiB, 847 * GiB)
    assert figures(s, "allocated_bytes", "large_pool") == (107268 * KiB, 4228 * MiB, 843 * GiB, 843 * GiB)
    assert figures(s, "allocated_bytes", "small_pool") == (39568 * KiB, 48 * MiB, 4 * GiB, 4 * GiB)
    assert figures(s, "active_bytes") == (146836 * KiB, 4261 * MiB, 847 * GiB, 847 * GiB)
    assert figures(s, "reserved_bytes") == (5176 * MiB, 5176 * MiB, 6340 * MiB, 1164 * MiB)
    assert figures(s, "reserved_bytes", "small_pool") == (52 * MiB, 52 * MiB, 66 * MiB, 14 * MiB)
    assert figures(s, "inactive_split_bytes") == (619115 * KiB, 839 * MiB, 351196 * MiB, 350592 * MiB)
    assert figures(s, "inactive_split_bytes", "large_pool") == (617723 * KiB, 833 * MiB, 345883 * MiB, 345280 * MiB)
    assert figures(s, "allocation") == (595, 820, 71826, 71231)
    assert figures(s, "active") == (595, 820, 71826, 71231)
    assert figures(s, "segment") == (106, 106, 125, 19)
    assert figures(s, "segment", "large_pool") == (80, 80, 92, 12)
    assert figures(s, "inactive_split") == (73, 107, 41956, 41883)
    assert figures(s, "inactive_split", "small_pool") == (62, 76, 19830, 19768)
    # the old table has no Requested or Oversize rows: None, not zero
    assert s.requested_bytes is None and s.oversize_allocations is None and s.oversize_segments is None


def test_sample_2_binary_units_requested_and_oversize():
    (s,) = parse_summaries(sample(2), "sample 2")
    assert (s.device, s.num_ooms, s.num_alloc_retries, s.unit_style) == (0, 0, 0, "KiB")
    assert figures(s, "allocated_bytes") == (5624 * MiB, 5673 * MiB, 22536 * MiB, 16911 * MiB)
    assert figures(s, "requested_bytes") == (5434 * MiB, 5464 * MiB, 20916 * MiB, 15481 * MiB)
    assert figures(s, "requested_bytes", "large_pool") == (5353 * MiB, 5380 * MiB, 7310 * MiB, 1957 * MiB)
    assert figures(s, "reserved_bytes") == (5684 * MiB, 5868 * MiB, 5870 * MiB, 190464 * KiB)
    assert figures(s, "reserved_bytes", "small_pool") == (84 * MiB, 248 * MiB, 250 * MiB, 169984 * KiB)
    assert figures(s, "inactive_split_bytes") == (60505 * KiB, 376319 * KiB, 20059 * MiB, 20000 * MiB)
    assert figures(s, "allocation") == (629, 670, 487593, 486964)
    assert figures(s, "segment") == (324, 407, 408, 84)
    assert figures(s, "inactive_split") == (32, 256, 222866, 222834)
    assert figures(s, "oversize_allocations") == (0, 0, 0, 0)
    assert figures(s, "oversize_segments") == (0, 0, 0, 0)
    assert s.oversize_allocations.large_pool is None  # the oversize rows have no per-pool lines


def test_sample_3_fresh_load_with_zero_byte_cells():
    (s,) = parse_summaries(sample(3), "sample 3")
    assert (s.device, s.num_ooms, s.num_alloc_retries, s.unit_style) == (0, 0, 0, "KiB")
    assert figures(s, "allocated_bytes") == (14324 * MiB, 14324 * MiB, 14324 * MiB, 0)
    assert figures(s, "allocated_bytes", "small_pool") == (0, 0, 0, 0)
    assert figures(s, "requested_bytes") == (14324 * MiB, 14324 * MiB, 14324 * MiB, 0)
    assert figures(s, "reserved_bytes") == (14586 * MiB, 14586 * MiB, 14586 * MiB, 0)
    assert figures(s, "reserved_bytes", "small_pool") == (2 * MiB, 2 * MiB, 2 * MiB, 0)
    assert figures(s, "inactive_split_bytes") == (267624 * KiB, 273856 * KiB, 773 * MiB, 524823 * KiB)
    assert figures(s, "inactive_split_bytes", "small_pool") == (1512 * KiB, 2047 * KiB, 1 * MiB, 535 * KiB)
    assert figures(s, "allocation") == (387, 387, 387, 0)
    assert figures(s, "segment", "large_pool") == (226, 226, 226, 0)
    assert figures(s, "oversize_segments") == (0, 0, 0, 0)


@pytest.mark.parametrize("n,expected", [
    (4, {"allocated_bytes": (1062 * MiB, 4877 * MiB, 89299 * MiB, 88237 * MiB),
         "reserved_bytes": (12420 * MiB, 12420 * MiB, 16924 * MiB, 4504 * MiB)}),
    (5, {"allocated_bytes": (26377 * MiB, 26988 * MiB, 767743 * GiB, 767717 * GiB)}),
    (6, {"allocated_bytes": (14356 * MiB, 23806 * MiB, 32225 * MiB, 17868 * MiB)}),
    (7, {"allocated_bytes": (1024, 133632, 273920, 272896)}),
])
def test_partial_tables_give_what_they_hold_and_none_for_the_rest(n, expected):
    (s,) = parse_summaries(sample(n), f"sample {n}")
    for metric, values in expected.items():
        assert figures(s, metric) == values
        assert getattr(s, metric).large_pool is None
    assert s.inactive_split_bytes is None and s.requested_bytes is None and s.device is None
    if n == 5:  # the header line, pasted misaligned
        assert (s.num_ooms, s.num_alloc_retries) == (1, 6)
    else:
        assert (s.num_ooms, s.num_alloc_retries) == (None, None)


def test_every_sample_of_the_file_is_read():
    assert len(re.findall(r"Sample \d", SAMPLES_MD)) >= 7
    for n in range(1, 8):
        assert parse_summaries(sample(n), f"sample {n}"), n


# ---- units, cells, prefixes, layout ----------------------------------------------------------------------

def test_a_cell_is_rounded_down_to_its_unit():
    s = parse_summary(sample(2))
    assert s.cell("reserved_bytes") == Cell(5684 * MiB, MiB)
    assert s.cell("reserved_bytes").upper == 5685 * MiB - 1
    assert s.cell("inactive_split_bytes") == Cell(60505 * KiB, KiB)
    assert parse_summary(sample(7)).cell("allocated_bytes", "peak") == Cell(133632, 1)


def test_count_cells_with_k_and_m_suffixes():
    text = ("| Allocations           |    1234 K  |       2 M  |    9999 K  |     750    |\n"
            "|       from large pool |      12 K  |       1 M  |       3 K  |       0    |")
    s = parse_summary(text)
    assert figures(s, "allocation") == (1234000, 2000000, 9999000, 750)
    assert figures(s, "allocation", "large_pool") == (12000, 1000000, 3000, 0)
    assert s.cell("allocation").upper == 1234999


@pytest.mark.parametrize("prefix", ["[rank0]: ", "2024-05-01 12:00:01,234 INFO [train.py:88] ", "> ", "    "])
def test_log_prefixes_are_read_through(prefix):
    plain = parse_summary(sample(2), "x")
    prefixed = parse_summary("\n".join(prefix + line for line in sample(2).splitlines()), "x")
    assert prefixed == plain


def test_an_abbreviated_table_has_no_pool_rows():
    text = "\n".join(line for line in sample(2).splitlines() if "from large pool" not in line
                     and "from small pool" not in line)
    s = parse_summary(text)
    assert figures(s, "reserved_bytes") == (5684 * MiB, 5868 * MiB, 5870 * MiB, 190464 * KiB)
    assert s.reserved_bytes.large_pool is None and s.reserved_bytes.small_pool is None


def test_several_tables_in_one_log():
    second = sample(1).replace("device ID 0", "device ID 1")
    text = "step 100\n" + sample(2) + "\nstep 200\n" + second + "\n"
    tables = parse_summaries(text, "log")
    assert [t.device for t in tables] == [0, 1]
    assert parse_summary(text, "log", device=0).figure("reserved_bytes") == 5684 * MiB
    assert parse_summary(text, "log").figure("reserved_bytes") == 5176 * MiB  # the last one by default
    assert [(t.position, t.tables) for t in tables] == [(1, 2), (2, 2)]
    assert diagnose_summary(tables[1]).findings[0].startswith("Table 2 of the 2 in the text, device 1: 0 OOMs")


def test_as_dict_uses_memory_stats_names():
    d = parse_summary(sample(2)).as_dict()
    assert d["inactive_split_bytes"]["all"]["peak"] == 376319 * KiB
    assert d["reserved_bytes"]["large_pool"]["freed"] == 20480 * KiB
    assert (d["num_ooms"], d["num_alloc_retries"], d["device"]) == (0, 0, 0)
    assert parse_summary(sample(1)).as_dict()["requested_bytes"] is None


# ---- refusals --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text", ["", "hello world\n", "| a | b | c |\n", "\x80\x03}q\x00(X\x08segments",
                                  "Allocated memory is high today", "| Allocated memory | lots | many | - | - |",
                                  "PyTorch CUDA memory summary, device ID 0"])
def test_text_without_a_table_is_one_line_naming_the_source(text):
    with pytest.raises(SummaryFormatError) as err:
        parse_summaries(text, "notes.txt")
    assert str(err.value) == "notes.txt: no torch.cuda.memory_summary() table found"


def test_input_past_the_cap_is_refused(tmp_path):
    big = sample(2) + "\n" + "x" * MAX_SUMMARY_BYTES
    with pytest.raises(SummaryFormatError, match=r"^big\.txt: more than 4 MiB") as err:
        decode(big.encode(), "big.txt")
    assert "\n" not in str(err.value)
    with pytest.raises(SummaryFormatError, match="more than 4 MiB"):
        parse_summaries(big, "big.txt")
    path = tmp_path / "big.txt"
    path.write_text(big)
    with pytest.raises(SummaryFormatError, match=f"^{re.escape(str(path))}: more than 4 MiB"):
        read_summary_text(str(path))


def test_a_missing_file_is_one_line():
    with pytest.raises(SummaryFormatError, match=r"^/nonexistent/x\.txt: cannot be read"):
        read_summary_text("/nonexistent/x.txt")


def test_a_long_line_is_not_a_table_line():
    with pytest.raises(SummaryFormatError):
        parse_summaries("| Allocated memory | 1 MiB |" + " " * 5000 + "\n", "t")


# ---- findings and verdicts -------------------------------------------------------------------------------

def with_header(table: str, ooms: int, retries: int) -> str:
    return re.sub(r"CUDA OOMs: 0\s+\|\s+cudaMalloc retries: 0",
                  f"CUDA OOMs: {ooms}            |        cudaMalloc retries: {retries}", table)


def test_sample_2_is_healthy_and_its_shares_are_worked_out():
    d = diagnose_summary(parse_summary(sample(2), "s2"))
    assert d.verdict == "healthy"
    text = " ".join(d.findings)
    # non-releasable 60505 KiB of 5684 MiB reserved = 1.04 %; peak 376319 KiB over the 5868 MiB peak = 6.26 %
    assert "59.09 MiB now, 1.0% of the 5.55 GiB reserved" in text
    assert "367.50 MiB at its peak, at least 6.3% of what was reserved then" in text
    # reserved - allocated now = 5684 - 5624 = 60 MiB; allocated - requested = 5624 - 5434 = 190 MiB (3.4 %)
    assert "Reserved but not allocated now: 60.00 MiB" in text
    assert "190.00 MiB (3.4% of allocated)" in text
    assert d.advice == ("Nothing to fix: no OOM, no cudaMalloc retry, and little memory stranded in split segments.",)
    assert d.disagreements == ()


def test_sample_1_strands_a_large_share_without_failing():
    d = diagnose_summary(parse_summary(sample(1), "s1"))
    # 619115 KiB / (5176 MiB) = 11.68 %: at or above a tenth, and 604.6 MiB > 32 MiB; no OOM, no retry
    assert d.verdict == "no_oom"
    assert "604.60 MiB now, 11.7% of the 5.05 GiB reserved" in " ".join(d.findings)
    assert any("before 2.0" in f for f in d.findings)
    assert any("expandable_segments:True (unless it is already set" in a for a in d.advice)


def test_ooms_with_a_large_non_releasable_share_is_fragmentation():
    d = diagnose_summary(parse_summary(with_header(sample(1), 2, 5), "s1"))
    assert d.verdict == "fragmentation"
    assert "2 OOMs raised, 5 cudaMalloc retries" in d.findings[0]
    assert any("The table does not give the failed request" in f for f in d.findings)  # what the verdict cannot know
    assert any(a.startswith("Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True") for a in d.advice)


def test_ooms_with_little_stranded_memory_is_exhaustion():
    # non-releasable peak 20480 KiB = 20 MiB < the 32 MiB margin: at no moment could packing have freed more
    table = re.sub(r"\| Non-releasable memory \|[^\n]*",
                   "| Non-releasable memory |  10240 KiB |  20480 KiB |  20059 MiB |  20000 MiB |",
                   with_header(sample(2), 1, 1))
    d = diagnose_summary(parse_summary(table, "t"))
    assert d.verdict == "exhaustion"
    assert any("non-releasable memory peaked at 20.00 MiB, under 32.00 MiB" in f for f in d.findings)
    assert not any("expandable_segments" in a for a in d.advice)
    assert any("reduce the batch size" in a for a in d.advice)


def test_ooms_with_a_middling_share_are_undetermined_until_the_message_decides():
    table = with_header(sample(2), 1, 1)  # non-releasable peak 367.5 MiB: above 32 MiB, 6.3 % of reserved
    alone = diagnose_summary(parse_summary(table, "t"))
    assert alone.verdict == "undetermined"
    assert any("non-releasable memory reached 367.50 MiB" in f for f in alone.findings)
    assert any("Pass the OOM message" in a for a in alone.advice)
    # The message: reserved 5.50 GiB + 60 MiB = 5692 MiB <= the table's 5868 MiB peak; device 0; 5.75 GiB card.
    # 60 MiB cached + 20 MiB free is far below the 2 GiB asked for, and 5888 - 20 - 5692 = 176 MiB outside
    # PyTorch is under a tenth of the card: exhaustion.
    message = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
               "of 5.75 GiB of which 20.00 MiB is free. Of the allocated memory 5.50 GiB is allocated by PyTorch, "
               "and 60.00 MiB is reserved by PyTorch but unallocated.")
    d = diagnose_summary(parse_summary(table, "t"), message=message, ooms=diagnose_message(message))
    assert d.disagreements == ()
    assert d.verdict == "exhaustion"
    assert any("the table alone says undetermined" in f for f in d.findings)


def test_a_message_that_disagrees_is_named_and_not_adopted():
    message = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 158.00 MiB. GPU 0 has a total "
               "capacity of 23.69 GiB of which 115.69 MiB is free. Of the allocated memory 22.14 GiB is allocated "
               "by PyTorch, and 910.35 MiB is reserved by PyTorch but unallocated.")
    d = diagnose_summary(parse_summary(sample(2), "s2"), message=message, ooms=diagnose_message(message))
    joined = " ".join(d.disagreements)
    assert "The table counts no OOM, yet the message reports one" in joined
    # 22.14 GiB + 910.35 MiB = 23.03 GiB reserved, far above the table's 5868 MiB peak
    assert "The message's 23.03 GiB reserved is more than the table's peak reserved (5.73 GiB)" in joined
    assert d.verdict == "healthy"  # the table's own, not the message's
    other = message.replace("GPU 0", "GPU 3")
    d = diagnose_summary(parse_summary(sample(2), "s2"), message=other, ooms=diagnose_message(other))
    assert d.disagreements == ("The table is for device 0, the OOM message for GPU 3: their figures are not combined.",)


def test_oversize_figures_show_max_split_size_is_in_force():
    # sample 1 (large non-releasable share) with an OOM and an Oversize row of a run with max_split_size_mb set
    table = with_header(sample(1), 1, 2) + "\n| Oversize allocations  |       3    |       5    |      40    |      37    |"
    d = diagnose_summary(parse_summaries(table, "t")[0])
    assert d.verdict == "fragmentation"
    assert any("max_split_size_mb is already in force" in a for a in d.advice)
    assert not any("Or set max_split_size_mb" in a for a in d.advice)


def test_a_setting_the_paste_shows_is_not_advised_but_the_oom_hint_is_no_setting():
    table = with_header(sample(1), 1, 0)
    hint = ("If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
            "to avoid fragmentation.")
    d = diagnose_summary(parse_summary(table), text=hint + "\n" + table)
    assert any(a.startswith("Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True") for a in d.advice)
    text = "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n" + table
    d = diagnose_summary(parse_summary(text), text=text)
    assert not any(a.startswith("Set PYTORCH_CUDA_ALLOC_CONF") for a in d.advice)
    assert any("expandable_segments:True is already in force" in a for a in d.advice)


# ---- with a snapshot -------------------------------------------------------------------------------------

def small_snapshot(tmp_path, settings: dict | None = None, oom: bool = False):
    """Device 0: one 20 MiB segment, a live 12 MiB block and a free 8 MiB one (worked out by hand)."""
    seg = segment(0x7F0000000000, [block(0x7F0000000000, 12 * MiB), block(0x7F0000C00000, 8 * MiB, "inactive")])
    trace = [ev("segment_alloc", 0x7F0000000000, 20 * MiB), ev("alloc", 0x7F0000000000, 12 * MiB)]
    if oom:
        trace.append(ev("oom", 0, 30 * MiB, device_free=MiB))
    extra = {"allocator_settings": settings} if settings is not None else {}
    path = write_pickle(str(tmp_path / "snap.pickle"), snapshot([seg], trace, **extra))
    return analyze(load_snapshot(path))


TABLE_AT_SNAPSHOT = """|                  PyTorch CUDA memory summary, device ID 0                 |
|            CUDA OOMs: 0            |        cudaMalloc retries: 0         |
| Allocated memory      |  12288 KiB |  12288 KiB |  12288 KiB |      0 B   |
| Active memory         |  12288 KiB |  12288 KiB |  12288 KiB |      0 B   |
| GPU reserved memory   |  20480 KiB |  20480 KiB |  20480 KiB |      0 B   |
| Non-releasable memory |   8192 KiB |   8192 KiB |   8192 KiB |      0 B   |"""


def test_a_snapshot_of_the_same_moment_adds_its_free_blocks(tmp_path):
    d = diagnose_summary(parse_summary(TABLE_AT_SNAPSHOT, "t"), analysis=small_snapshot(tmp_path))
    assert d.disagreements == ()
    assert any("matches the table's current figures (20.00 MiB reserved): its 8.00 MiB of free cached blocks lie "
               "in 1 piece(s), the largest 8.00 MiB" in f for f in d.findings)


def test_a_snapshot_that_cannot_be_the_same_run_is_named(tmp_path):
    other_device = TABLE_AT_SNAPSHOT.replace("device ID 0", "device ID 2")
    d = diagnose_summary(parse_summary(other_device, "t"), analysis=small_snapshot(tmp_path))
    assert d.disagreements == ("The table is for device 2; the snapshot has device(s) 0: their figures are not "
                               "combined.",)
    later = TABLE_AT_SNAPSHOT.replace("20480 KiB |  20480 KiB |  20480 KiB", "16384 KiB |  16384 KiB |  16384 KiB")
    d = diagnose_summary(parse_summary(later, "t"), analysis=small_snapshot(tmp_path, oom=True))
    joined = " ".join(d.disagreements)
    assert "The snapshot records 1 OOM(s) on device 0, the table counts 0" in joined
    # the trace reserves a 20 MiB segment; the table's peak reserved is 16 MiB
    assert "The snapshot reaches 20.00 MiB reserved on device 0, more than the table's peak reserved (16.00 MiB)" in joined
    assert "not the same moment" in joined


def test_settings_the_snapshot_records_are_not_advised(tmp_path):
    table = with_header(sample(1), 1, 3)
    on = small_snapshot(tmp_path, {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "max_split_size": -1,
                                   "expandable_segments": True})
    d = diagnose_summary(parse_summary(table), analysis=on)
    assert not any(a.startswith("Set PYTORCH_CUDA_ALLOC_CONF") for a in d.advice)
    assert any("already in force (the snapshot's allocator_settings)" in a for a in d.advice)
    off = small_snapshot(tmp_path, {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1, "expandable_segments": False})
    d = diagnose_summary(parse_summary(table), analysis=off)
    assert any(a.startswith("Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: ") for a in d.advice)
