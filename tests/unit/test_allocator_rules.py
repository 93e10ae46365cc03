"""PyTorch's sizing rules, one by one, with the worked examples of the format reference (Part C)."""
from __future__ import annotations

import pytest

from fragviz.allocator.config import AllocConfError, AllocatorSettings, parse_alloc_conf, settings_from_snapshot
from fragviz.allocator.rules import allocation_size, round_size, should_split
from tests.support.helpers import KiB, MiB

DEFAULT = AllocatorSettings()


@pytest.mark.parametrize("request_size,rounded", [
    (1, 512), (511, 512), (512, 512), (513, 1024), (1000, 1024), (5 * MiB, 5 * MiB), (10 * MiB + 1, 10 * MiB + 512),
])
def test_round_size_default(request_size, rounded):
    assert round_size(request_size, DEFAULT) == rounded


def test_round_size_with_four_divisions():
    four = parse_alloc_conf("roundup_power2_divisions:4")
    assert round_size(1200, four) == 1536  # 1200 is not > 512*4, so plain 512 rounding (not 1280)
    assert round_size(5000, four) == 5120  # floor 4096, step 1024
    assert round_size(int(1.2 * MiB), four) == int(1.25 * MiB)  # floor 1 MiB, step 256 KiB
    assert round_size(4 * MiB, four) == 4 * MiB  # powers of two stay


def test_divisions_list_form_key_applies_from_its_own_interval():
    s = parse_alloc_conf("roundup_power2_divisions:[64:8,128:2,>:1]")
    assert s.divisions_for(64 * MiB) == 8
    assert s.divisions_for(100 * MiB) == 8
    assert s.divisions_for(128 * MiB) == 2
    assert s.divisions_for(1 * MiB) == 8  # the first value fills every smaller interval
    assert s.divisions_for(256 * MiB) == 1  # '>' fills what follows the last key
    assert s.divisions_for(64 * 1024 * MiB) == 1


@pytest.mark.parametrize("rounded,segment", [
    (1024, 2 * MiB), (MiB, 2 * MiB), (MiB + 512, 20 * MiB), (5 * MiB, 20 * MiB), (10 * MiB, 10 * MiB),
    (10 * MiB + 512, 12 * MiB), (int(11.5 * MiB), 12 * MiB),
])
def test_allocation_size(rounded, segment):
    assert allocation_size(rounded) == segment


@pytest.mark.parametrize("block,rounded,small,split", [
    (2 * MiB, 1024, True, True),                 # 1000 B in a fresh small segment
    (20 * MiB, 5 * MiB, False, True),            # 15 MiB left > 1 MiB
    (12 * MiB, 10 * MiB + 512, False, True),     # 2 MiB - 512 left > 1 MiB
    (12 * MiB, int(11.5 * MiB), False, False),   # 0.5 MiB left: the block keeps it
    (20 * MiB, int(19.5 * MiB), False, False),
    (11 * MiB, 10 * MiB, False, False),          # exactly 1 MiB left is not > 1 MiB
    (1024 + 512, 1024, True, True),              # small pool: 512 left is enough
])
def test_should_split_default(block, rounded, small, split):
    assert should_split(block, rounded, small, DEFAULT) is split


def test_should_split_with_max_split_and_expandable():
    capped = parse_alloc_conf("max_split_size_mb:128")
    assert capped.max_split_size == 128 * MiB
    assert should_split(300 * MiB, 130 * MiB, False, capped) is False  # oversize requests never split
    assert should_split(300 * MiB, 100 * MiB, False, capped) is True
    expandable = parse_alloc_conf("expandable_segments:True")
    assert should_split(20 * MiB, 20 * MiB - 512, False, expandable) is True  # >= 512 B left


def test_parse_resets_split_divisions_and_gc_but_not_expandable():
    base = parse_alloc_conf("expandable_segments:True,max_split_size_mb:64,garbage_collection_threshold:0.6")
    again = parse_alloc_conf("roundup_power2_divisions:2", base)
    assert again.expandable_segments is True
    assert again.max_split_size is None and again.garbage_collection_threshold == 0.0


@pytest.mark.parametrize("conf,message", [
    ("max_split_size_mb:10", "at least 20"),
    ("garbage_collection_threshold:1.5", "(0, 1)"),
    ("expandable_segments:yes", "True or False"),
    ("roundup_power2_divisions:3", "power of two"),
    ("bogus_key:1", "unrecognized key 'bogus_key'"),
    ("max_split_size_mb", "no value"),
])
def test_bad_conf_strings(conf, message):
    with pytest.raises(AllocConfError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_alloc_conf(conf)


def test_settings_from_a_snapshot_dict():
    raw = {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:256", "max_split_size": 256 * MiB,
           "garbage_collection_threshold": 0.0, "expandable_segments": False,
           "roundup_power2_divisions": {"1": 4, "2": 4, "4": 0, "8": 0, "16": 0, "32": 0, "64": 0, "128": 0,
                                        "256": 0, "512": 0, "1024": 0, "2048": 0, "4096": 0, "8192": 0,
                                        "16384": 0, "32768": 8}}
    s = settings_from_snapshot(raw)
    assert s.max_split_size == 256 * MiB
    assert s.divisions_for(512 * KiB) == 4 and s.divisions_for(3 * MiB) == 4 and s.divisions_for(5 * MiB) == 0
    assert s.divisions_for(40 * 1024 * MiB) == 8
    assert settings_from_snapshot({"max_split_size": -1}).max_split_size is None
    assert settings_from_snapshot(None) == DEFAULT
