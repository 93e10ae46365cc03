"""Memory budgets: the limits a gate checks, parsed from what a user writes ("2GiB", "5%", "0.3")."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from fragviz.base.errors import UsageError
from fragviz.base.units import parse_size


@dataclass(frozen=True)
class Budgets:
    """Each limit is None when not given; `growth` is a fraction (0.05 for 5 %)."""

    peak_reserved: int | None = None
    peak_allocated: int | None = None
    growth: float | None = None
    fragmentation: float | None = None
    device_memory: int | None = None
    alloc_conf: str | None = None

    @property
    def any(self) -> bool:
        return any(v is not None for v in (self.peak_reserved, self.peak_allocated, self.growth,
                                           self.fragmentation, self.device_memory))

    def as_dict(self) -> dict[str, Any]:
        return {"max_peak_reserved": self.peak_reserved, "max_peak_allocated": self.peak_allocated,
                "max_growth": self.growth, "max_fragmentation": self.fragmentation,
                "device_memory": self.device_memory, "alloc_conf": self.alloc_conf}


def budgets_from_text(peak_reserved: str | None = None, peak_allocated: str | None = None,
                      growth: str | None = None, fragmentation: str | None = None,
                      device_memory: str | None = None, alloc_conf: str | None = None) -> Budgets:
    """Budgets as written on a command line or in a marker; a bad value raises UsageError naming it."""
    if alloc_conf is not None and device_memory is None:
        raise UsageError("--alloc-conf goes with --device-memory: the settings are those the candidate's trace is "
                         "simulated under on that device")
    return Budgets(
        peak_reserved=_size(peak_reserved, "--max-peak-reserved"),
        peak_allocated=_size(peak_allocated, "--max-peak-allocated"),
        growth=None if growth is None else parse_growth(growth),
        fragmentation=None if fragmentation is None else parse_ratio(fragmentation, "--max-fragmentation"),
        device_memory=_size(device_memory, "--device-memory"),
        alloc_conf=alloc_conf)


def _size(text: str | int | None, what: str) -> int | None:
    if text is None:
        return None
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    try:
        return parse_size(str(text))
    except UsageError as exc:
        raise UsageError(f"{what}: {exc}") from None


_NUMBER = re.compile(r"\s*([0-9]*\.?[0-9]+)\s*(%?)\s*")


def parse_growth(text: str | float) -> float:
    """'5%' or '5' (percent) -> 0.05: how much a peak may grow over its baseline."""
    m = _NUMBER.fullmatch(str(text))
    if not m:
        raise UsageError(f"--max-growth: '{str(text)[:40]}' is not a percentage: write e.g. 5% (or 5)")
    value = float(m.group(1)) / 100
    if not math.isfinite(value):  # 5,000 digits read as a float: infinity, which no baseline can be grown by
        raise UsageError(f"--max-growth: '{str(text)[:40]}...' is too large a percentage: write e.g. 5% (or 5)")
    return value


def parse_ratio(text: str | float, what: str) -> float:
    """'0.3' or '30%' -> 0.3, between 0 and 1."""
    m = _NUMBER.fullmatch(str(text))
    value = None if not m else float(m.group(1)) / (100 if m.group(2) else 1)
    if value is None or value > 1:
        raise UsageError(f"{what}: '{str(text)[:40]}' is not a ratio: write a number from 0 to 1, or a percentage "
                         "(0.3 or 30%)")
    return value


def gate_command(candidate: str, baseline: str | None, budgets: Budgets, db: str | None = None) -> str:
    """The `fragviz gate` command line that checks these budgets (what the dashboard offers to copy)."""
    import shlex

    words = ["fragviz", "gate", candidate]
    if baseline is not None:
        words += ["--baseline", baseline]
    if budgets.peak_reserved is not None:
        words += ["--max-peak-reserved", size_text(budgets.peak_reserved)]
    if budgets.peak_allocated is not None:
        words += ["--max-peak-allocated", size_text(budgets.peak_allocated)]
    if budgets.growth is not None:
        words += ["--max-growth", f"{budgets.growth * 100:g}%"]
    if budgets.fragmentation is not None:
        words += ["--max-fragmentation", f"{budgets.fragmentation:g}"]
    if budgets.device_memory is not None:
        words += ["--device-memory", size_text(budgets.device_memory)]
    if budgets.alloc_conf is not None:
        words += ["--alloc-conf", budgets.alloc_conf]
    if db is not None:
        words += ["--db", db]
    return " ".join(shlex.quote(w) for w in words)


def size_text(n: int) -> str:
    """A byte count as the shortest exact size text parse_size reads back: '2GiB', '1536MiB', '1000'."""
    for unit, scale in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return str(n)
