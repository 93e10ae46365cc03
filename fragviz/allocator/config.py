"""Allocator settings: PYTORCH_CUDA_ALLOC_CONF strings and a snapshot's `allocator_settings` dict.

Rules follow c10/core/AllocatorConfig.cpp and c10/cuda/CUDAAllocatorConfig.cpp (reference C.2, C.5).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from fragviz.base.errors import FragvizError
from fragviz.base.units import LARGE_BUFFER, MiB

ROUNDUP_INTERVALS = 16


class AllocConfError(FragvizError):
    """A PYTORCH_CUDA_ALLOC_CONF string that PyTorch itself would reject."""


@dataclass(frozen=True)
class AllocatorSettings:
    """The settings that change where and how big blocks and segments are."""

    max_split_size: int | None = None  # bytes; None is unlimited (PyTorch's SIZE_MAX, -1 in snapshots)
    max_non_split_rounding: int = LARGE_BUFFER
    roundup_power2_divisions: tuple[int, ...] = field(default=(0,) * ROUNDUP_INTERVALS)
    garbage_collection_threshold: float = 0.0
    expandable_segments: bool = False
    memory_fraction: float | None = None
    conf: str = ""

    def divisions_for(self, size: int) -> int:
        """Divisions for an (unrounded) size: interval 0 below 2 MiB, i for [2^(20+i), 2^(21+i)), 15 above."""
        idx = max(0, size.bit_length() - 1 - 20) if size > 0 else 0
        return self.roundup_power2_divisions[min(idx, ROUNDUP_INTERVALS - 1)]

    def as_dict(self) -> dict[str, Any]:
        return {
            "PYTORCH_CUDA_ALLOC_CONF": self.conf,
            "max_split_size": -1 if self.max_split_size is None else self.max_split_size,
            "max_non_split_rounding_size": self.max_non_split_rounding,
            "roundup_power2_divisions": {str(1 << i): v for i, v in enumerate(self.roundup_power2_divisions)},
            "garbage_collection_threshold": self.garbage_collection_threshold,
            "expandable_segments": self.expandable_segments,
            "per_process_memory_fraction": self.memory_fraction,
        }


DEFAULT_SETTINGS = AllocatorSettings()


def settings_from_snapshot(raw: dict[str, Any] | None) -> AllocatorSettings:
    """Settings recorded in a snapshot's `allocator_settings`; defaults for what it lacks (every key optional)."""
    if not raw:
        return DEFAULT_SETTINGS
    split = raw.get("max_split_size", -1)
    divisions = raw.get("roundup_power2_divisions") or {}
    table = [0] * ROUNDUP_INTERVALS
    if isinstance(divisions, dict):
        for key, value in divisions.items():
            try:
                table[min(ROUNDUP_INTERVALS - 1, int(key).bit_length() - 1)] = int(value)
            except (TypeError, ValueError):
                continue
    return AllocatorSettings(
        max_split_size=None if not isinstance(split, int) or split < 0 else split,
        roundup_power2_divisions=tuple(table),
        garbage_collection_threshold=float(raw.get("garbage_collection_threshold") or 0.0),
        expandable_segments=bool(raw.get("expandable_segments", False)),
        conf=str(raw.get("PYTORCH_CUDA_ALLOC_CONF") or ""))


def parse_alloc_conf(conf: str, base: AllocatorSettings = DEFAULT_SETTINGS) -> AllocatorSettings:
    """Apply a PYTORCH_CUDA_ALLOC_CONF string, as PyTorch does: split size, divisions and GC reset first."""
    settings = replace(base, max_split_size=None, roundup_power2_divisions=(0,) * ROUNDUP_INTERVALS,
                       garbage_collection_threshold=0.0, conf=conf)
    for key, value in _options(conf):
        settings = _apply(settings, key, value)
    return settings


def _options(conf: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    depth, start = 0, 0
    for i, ch in enumerate(conf + ","):
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            item = conf[start:i].strip()
            start = i + 1
            if not item:
                continue
            key, sep, value = item.partition(":")
            if not sep:
                raise AllocConfError(f"PYTORCH_CUDA_ALLOC_CONF: '{item}' has no value (expected key:value)")
            out.append((key.strip(), value.strip()))
    return out


def _apply(s: AllocatorSettings, key: str, value: str) -> AllocatorSettings:
    if key == "max_split_size_mb":
        mb = _number(key, value)
        if mb < 20:
            raise AllocConfError(f"PYTORCH_CUDA_ALLOC_CONF: max_split_size_mb must be at least 20, got {value}")
        return replace(s, max_split_size=int(mb * MiB))
    if key == "max_non_split_rounding_mb":
        mb = _number(key, value)
        if mb < 20:
            raise AllocConfError(f"PYTORCH_CUDA_ALLOC_CONF: max_non_split_rounding_mb must be at least 20, got {value}")
        return replace(s, max_non_split_rounding=int(mb * MiB))
    if key == "roundup_power2_divisions":
        return replace(s, roundup_power2_divisions=_parse_divisions(value))
    if key == "garbage_collection_threshold":
        t = _number(key, value)
        if not 0.0 < t < 1.0:
            raise AllocConfError("PYTORCH_CUDA_ALLOC_CONF: garbage_collection_threshold must be in (0, 1)")
        return replace(s, garbage_collection_threshold=t)
    if key == "expandable_segments":
        return replace(s, expandable_segments=_bool(key, value))
    if key == "per_process_memory_fraction":
        f = _number(key, value)
        if not 0.0 <= f <= 1.0:
            raise AllocConfError("PYTORCH_CUDA_ALLOC_CONF: per_process_memory_fraction must be in [0, 1]")
        return replace(s, memory_fraction=f)
    if key in _IGNORED_KEYS or key.startswith("pinned_"):
        return s
    raise AllocConfError(f"PYTORCH_CUDA_ALLOC_CONF: unrecognized key '{key}'")


_IGNORED_KEYS = {"backend", "release_lock_on_cudamalloc", "graph_capture_record_stream_reuse",
                 "throw_on_cudamalloc_oom", "large_segment_size_mb"}


def _parse_divisions(value: str) -> tuple[int, ...]:
    table = [0] * ROUNDUP_INTERVALS
    if not value.startswith("["):
        v = _power_of_two(int(_number("roundup_power2_divisions", value)))
        return (v,) * ROUNDUP_INTERVALS
    items = [i.strip() for i in value.strip("[]").split(",") if i.strip()]
    first, last = True, -1
    for item in items:
        k, _, v = item.partition(":")
        div = _power_of_two(int(_number("roundup_power2_divisions", v)))
        if k.strip() == ">":
            for i in range(last + 1, ROUNDUP_INTERVALS):
                table[i] = div
            continue
        mb = int(_number("roundup_power2_divisions", k))
        if mb <= 0 or mb & (mb - 1):
            raise AllocConfError(f"PYTORCH_CUDA_ALLOC_CONF: roundup_power2_divisions boundary {k} is not a power of two")
        idx = min(ROUNDUP_INTERVALS - 1, mb.bit_length() - 1)
        if first:
            for i in range(idx):
                table[i] = div
            first = False
        table[idx] = div
        last = idx
    return tuple(table)


def _power_of_two(v: int) -> int:
    if v and v & (v - 1):
        raise AllocConfError(f"PYTORCH_CUDA_ALLOC_CONF: roundup_power2_divisions value {v} is not a power of two")
    return v


def _number(key: str, value: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise AllocConfError(f"PYTORCH_CUDA_ALLOC_CONF: {key} expects a number, got '{value}'") from None


def _bool(key: str, value: str) -> bool:
    if value in ("True", "true", "1"):
        return True
    if value in ("False", "false", "0"):
        return False
    raise AllocConfError(f"PYTORCH_CUDA_ALLOC_CONF: {key} expects True or False, got '{value}'")
