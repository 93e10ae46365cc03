"""Reading `torch.cuda.memory_summary()` tables, as pasted from a log, into figures.

Every format PyTorch has printed: the table before 2.0 with `KB`/`MB`/`GB` cells and no "Requested memory" or
"Oversize" rows, the table from 2.0 on with `KiB`/`MiB`/`GiB` cells (pytorch/pytorch PR #91854), abbreviated
tables without the per-pool rows, count cells with `K`/`M` suffixes, lines behind log prefixes, and partial
pastes of a few rows. Figures the text does not give are None.

How PyTorch prints a cell (`_format_size` / `_format_count` in torch/cuda/memory.py) decides what a cell means:
- the unit of a column is chosen from the "all" row's value and the per-pool rows use it too;
- the value is divided by 1024 per unit step with floor division (`sz //= 1024`), so "5684 MiB" is some
  number of bytes in [5684 MiB, 5685 MiB): each cell is a lower bound, exact to one unit;
- before 2.0 the same code labelled the units "KB", "MB", "GB": they are 1024, 1024**2, 1024**3 bytes
  (binary), not decimal; PR #91854 only renamed them;
- counts divide by 1000 per step ("K", "M"), with floor division as well.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, fields
from typing import Any

from fragviz.base.errors import FragvizError
from fragviz.base.units import MiB

MAX_SUMMARY_BYTES = 4 * MiB  # a full table is about 3 KiB; a log around it may be long, but not this long
MAX_LINE = 4096  # a table line is 77 characters plus a log prefix: longer lines are not table lines

_SIZE_UNITS = {"B": 1, "KB": 1024, "MB": 1024**2, "GB": 1024**3, "TB": 1024**4, "PB": 1024**5,
               "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, "TiB": 1024**4, "PiB": 1024**5}
_COUNT_UNITS = {"": 1, "K": 1000, "M": 1000**2}

# (key as in torch.cuda.memory_stats(), row label, bytes or counts), in the order PyTorch prints them
METRICS: tuple[tuple[str, str, str], ...] = (
    ("allocated_bytes", r"Allocated memory", "bytes"),
    ("active_bytes", r"Active memory", "bytes"),
    ("requested_bytes", r"Requested memory", "bytes"),
    ("reserved_bytes", r"\w+ reserved memory", "bytes"),
    ("inactive_split_bytes", r"Non-releasable memory", "bytes"),
    ("allocation", r"Allocations", "count"),
    ("active", r"Active allocs", "count"),
    ("segment", r"\w+ reserved segments", "count"),
    ("inactive_split", r"Non-releasable allocs", "count"),
    ("oversize_allocations", r"Oversize allocations", "count"),
    ("oversize_segments", r"Oversize \w+ segments", "count"),
)
_KIND = {key: kind for key, _, kind in METRICS}
_POOLS = {"from large pool": "large_pool", "from small pool": "small_pool"}
_LABELS = "|".join(f"(?P<{key}>{label})" for key, label, _ in METRICS)
_ROW = re.compile(rf"(?<![\w-])(?:{_LABELS}|(?P<pool>from (?:large|small) pool))[ \t]*\|(?P<cells>.*)")
_TITLE = re.compile(r"memory summary, device ID\s+(\d+)")
_OOMS = re.compile(r"\bOOMs:\s*(\d+)")
_RETRIES = re.compile(r"[Mm]alloc retries:\s*(\d+)")
_SIZE_CELL = re.compile(r"\s*(\d+)\s*(B|[KMGTP]i?B)\s*")
_COUNT_CELL = re.compile(r"\s*(\d+)\s*([KM]?)\s*")


class SummaryFormatError(FragvizError):
    """A text that holds no memory_summary() table, or one too large to be a paste."""

    def __init__(self, source: str, problem: str) -> None:
        super().__init__(f"{source}: {problem}")
        self.source = source


@dataclass(frozen=True)
class Cell:
    """One printed figure: `value` in bytes (or a count) as printed, rounded down to `unit`."""

    value: int
    unit: int

    @property
    def upper(self) -> int:
        """The largest true value the cell can stand for."""
        return self.value + self.unit - 1


@dataclass(frozen=True)
class Row:
    """One line of the table: Cur Usage, Peak Usage, Tot Alloc, Tot Freed."""

    current: Cell | None = None
    peak: Cell | None = None
    allocated: Cell | None = None
    freed: Cell | None = None


@dataclass(frozen=True)
class Metric:
    """A metric's rows: all pools together, and the large and small pool (absent in abbreviated tables)."""

    all: Row | None = None
    large_pool: Row | None = None
    small_pool: Row | None = None


@dataclass(frozen=True)
class MemorySummary:
    """The figures of one memory_summary() table; None where the text does not say."""

    source: str
    device: int | None = None
    num_ooms: int | None = None
    num_alloc_retries: int | None = None
    unit_style: str | None = None  # "KB" (before 2.0; binary all the same), "KiB" (2.0 on), None: not shown
    position: int = 1  # which table of the text this is (1-based)
    tables: int = 1  # of how many
    allocated_bytes: Metric | None = None
    active_bytes: Metric | None = None
    requested_bytes: Metric | None = None
    reserved_bytes: Metric | None = None
    inactive_split_bytes: Metric | None = None
    allocation: Metric | None = None
    active: Metric | None = None
    segment: Metric | None = None
    inactive_split: Metric | None = None
    oversize_allocations: Metric | None = None
    oversize_segments: Metric | None = None

    def cell(self, metric: str, column: str = "current", pool: str = "all") -> Cell | None:
        """One cell: `metric` a memory_stats() key, `column` current/peak/allocated/freed, `pool` all/large_pool/small_pool."""
        m = getattr(self, metric)
        row = getattr(m, pool) if m is not None else None
        return getattr(row, column) if row is not None else None

    def figure(self, metric: str, column: str = "current", pool: str = "all") -> int | None:
        c = self.cell(metric, column, pool)
        return c.value if c is not None else None

    def as_dict(self) -> dict[str, Any]:
        """The figures in memory_stats()'s own shape: {metric: {pool: {column: value}}}; None where absent."""
        out: dict[str, Any] = {"device": self.device, "num_ooms": self.num_ooms,
                               "num_alloc_retries": self.num_alloc_retries, "unit_style": self.unit_style,
                               "table": self.position, "tables": self.tables}
        for key, _, _ in METRICS:
            m = getattr(self, key)
            out[key] = None if m is None else {pool: _row_dict(getattr(m, pool)) for pool in ("all", *_POOLS.values())}
        return out


def _row_dict(row: Row | None) -> dict[str, int | None] | None:
    if row is None:
        return None
    return {f.name: (c.value if (c := getattr(row, f.name)) is not None else None) for f in fields(Row)}


def decode(data: bytes, source: str) -> str:
    """The text of a paste, refused past MAX_SUMMARY_BYTES (one line naming the source)."""
    if len(data) > MAX_SUMMARY_BYTES:
        raise SummaryFormatError(source, f"more than {MAX_SUMMARY_BYTES // MiB} MiB: too large for a pasted "
                                 "torch.cuda.memory_summary() table (paste the table and the lines around it)")
    return data.decode("utf-8", errors="replace")


def read_summary_text(path: str, stream: Any = None) -> str:
    """The text at `path` ("-": `stream`, standard input's bytes), read no further than the size cap."""
    source = "<stdin>" if path == "-" else path
    try:
        if path == "-":
            return decode(stream.read(MAX_SUMMARY_BYTES + 1), source)
        with open(path, "rb") as fh:
            return decode(fh.read(MAX_SUMMARY_BYTES + 1), source)
    except OSError as exc:
        raise SummaryFormatError(source, f"cannot be read ({exc.strerror or type(exc).__name__})") from None


def parse_summaries(text: str, source: str = "the text") -> list[MemorySummary]:
    """Every memory_summary() table in `text`, in order; a second title, header or repeated row starts the next."""
    if len(text) > MAX_SUMMARY_BYTES:
        raise SummaryFormatError(source, f"more than {MAX_SUMMARY_BYTES // MiB} MiB: too large for a pasted "
                                 "torch.cuda.memory_summary() table")
    tables: list[_Table] = [_Table()]
    for line in text.splitlines():
        if len(line) <= MAX_LINE:
            _read_line(tables, line)
    found = [t for t in tables if t.has_figures()]
    if not found:
        raise SummaryFormatError(source, "no torch.cuda.memory_summary() table found")
    return [t.summary(source, n, len(found)) for n, t in enumerate(found, 1)]


def parse_summary(text: str, source: str = "the text", device: int | None = None) -> MemorySummary:
    """The table of `device` where several are pasted (else the last one)."""
    tables = parse_summaries(text, source)
    return next((t for t in reversed(tables) if device is not None and t.device == device), tables[-1])


class _Table:
    """A table while its lines are read."""

    def __init__(self) -> None:
        self.device: int | None = None
        self.ooms: int | None = None
        self.retries: int | None = None
        self.rows: dict[str, dict[str, Row]] = {}
        self.last: str | None = None
        self.units: set[str] = set()

    def has_figures(self) -> bool:
        return bool(self.rows) or self.ooms is not None or self.retries is not None

    def summary(self, source: str, position: int, tables: int) -> MemorySummary:
        style = "KiB" if any("i" in u for u in self.units) else ("KB" if self.units - {"B"} else None)
        metrics = {key: Metric(**pools) for key, pools in self.rows.items()}
        return MemorySummary(source, self.device, self.ooms, self.retries, style, position, tables, **metrics)


def _read_line(tables: list[_Table], line: str) -> None:
    title, ooms, retries = _TITLE.search(line), _OOMS.search(line), _RETRIES.search(line)
    if title or ooms or retries:
        t = tables[-1]
        if t.rows or (title and t.device is not None) or (ooms and t.ooms is not None):
            tables.append(t := _Table())
        t.device = int(title.group(1)) if title else t.device
        t.ooms = int(ooms.group(1)) if ooms else t.ooms
        t.retries = int(retries.group(1)) if retries else t.retries
        return
    m = _ROW.search(line)
    if m:
        _read_row(tables, m)


def _read_row(tables: list[_Table], m: re.Match[str]) -> None:
    t = tables[-1]
    pool = _POOLS.get(m.group("pool") or "")
    key = t.last if pool else next(k for k, _, _ in METRICS if m.group(k) is not None)
    if key is None:
        return  # a pool row with no metric row before it
    if not pool and key in t.rows:
        tables.append(t := _Table())
    row = _row(m.group("cells"), _KIND[key], t.units)
    if row is None:
        return
    t.rows.setdefault(key, {})[pool or "all"] = row
    t.last = key


def _row(cells: str, kind: str, units: set[str]) -> Row | None:
    parsed = [_cell(c, kind, units) for c in cells.split("|")[:4]]
    if not any(parsed):
        return None
    return Row(*(parsed + [None] * (4 - len(parsed))))


def _cell(text: str, kind: str, units: set[str]) -> Cell | None:
    if kind == "bytes":
        m = _SIZE_CELL.fullmatch(text)
        if m is None or m.group(2) not in _SIZE_UNITS:
            return None
        units.add(m.group(2))
        unit = _SIZE_UNITS[m.group(2)]
    else:
        m = _COUNT_CELL.fullmatch(text)
        if m is None:
            return None
        unit = _COUNT_UNITS[m.group(2)]
    return Cell(int(m.group(1)) * unit, unit)

