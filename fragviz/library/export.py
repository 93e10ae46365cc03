"""Data out: a stored snapshot's figures over time, its allocations, or one state's segments and blocks, as
pandas frames, written as Parquet or CSV (`fragviz export`, and the dashboard's export route).

Events are numbered as everywhere in fragviz: state K is the allocator's state after the first K events of a
device's trace, so a trace of n events has states 0..n. An allocation is live in states start_event <= K <
end_event (end_event null: still live at the end); the blocks live before the trace began are the active
blocks of the segments export at event 0.

All store access is through `Library`'s public methods, here and nowhere else in this module.
"""
from __future__ import annotations

import io
import os
import re
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa

from fragviz.base.cells import spreadsheet_text
from fragviz.base.errors import UsageError
from fragviz.base.files import check_output, write_output
from fragviz.model.lod import per_event
from fragviz.model import NO_TIME, Segment
from fragviz.usage.kinds import KINDS
from fragviz.usage.stacks import StackFacts, stack_facts, stack_text

if TYPE_CHECKING:  # the reader is passed in: this module reads through its public methods only
    from fragviz.library import Library

WHATS = ("series", "allocations", "segments")
FORMATS = ("parquet", "csv")
MEDIA_TYPES = {"parquet": "application/vnd.apache.parquet", "csv": "text/csv"}
SNAPSHOT_SUFFIXES = (".gz", ".pickle", ".pkl", ".json", ".pt")

# Columns and their dtypes, in order: the interface of the files (pandas' nullable Int64 where a value may be
# missing, "string" for text; every column of a frame with no rows keeps its dtype).
COLUMNS: dict[str, dict[str, str]] = {
    "series": {"device": "int64", "event": "int64", "time_us": "Int64", "allocated_bytes": "int64",
               "requested_bytes": "int64", "reserved_bytes": "int64", "free_bytes": "int64",
               "largest_free_block": "int64", "non_releasable_bytes": "int64", "fragmentation": "float64",
               "free_scatter": "float64"},
    "allocations": {"device": "int64", "address": "int64", "size": "int64", "requested_size": "int64",
                    "stream": "int64", "start_event": "int64", "end_event": "Int64", "start_us": "Int64",
                    "end_us": "Int64", "site": "string", "kind": "string", "stack": "string"},
    "segments": {"device": "int64", "segment_address": "int64", "segment_size": "int64", "pool": "string",
                 "stream": "int64", "is_expandable": "boolean", "block_address": "int64", "block_size": "int64",
                 "requested_size": "int64", "state": "string", "site": "string"},
}


@dataclass(frozen=True)
class ExportRequest:
    """What to export: `what` (WHATS), one device or every one (None), and for segments the event (None: the
    final recorded state)."""

    what: str = "series"
    device: int | None = None
    at: int | None = None

    def __post_init__(self) -> None:
        if self.what not in WHATS:
            raise UsageError(f"cannot export '{str(self.what)[:40]}': choose one of {', '.join(WHATS)}")
        if self.at is not None and self.what != "segments":
            raise UsageError(f"an event (--at) goes with segments, not with {self.what}")


# -- frames --------------------------------------------------------------------------------------------------

def snapshot_frame(reader: Library, sid: int, req: ExportRequest) -> pd.DataFrame:
    """The rows of one stored snapshot, device by device."""
    devices = _devices(reader, sid, req)
    if req.what == "series":
        parts = [_series(reader, sid, d) for d in devices]
    else:
        facts, texts = _stack_facts(reader, sid)
        if req.what == "allocations":
            parts = [_allocations(reader, sid, d, facts, texts) for d in devices]
        else:
            parts = [_segments(reader, sid, d, _event(reader, sid, d, req.at), facts) for d in devices]
    return _concat(parts, req.what)


def job_frame(reader: Library, job_id: int, req: ExportRequest) -> pd.DataFrame:
    """The rows of every rank of a stored job, one after the other, with a `rank` column first."""
    ranks = reader.job(job_id).ranks
    parts = [_with_rank(snapshot_frame(reader, r.snapshot_id, req), r.rank) for r in ranks]
    return pd.concat(parts, ignore_index=True) if parts else _with_rank(_concat([], req.what), 0)


def _with_rank(frame: pd.DataFrame, rank: int) -> pd.DataFrame:
    frame.insert(0, "rank", pd.Series(np.full(len(frame), rank, np.int64), index=frame.index))
    return frame


def _devices(reader: Library, sid: int, req: ExportRequest) -> list[int]:
    devices = reader.snapshot_row(sid).devices
    if req.device is None:
        return list(devices)
    if req.device not in devices:
        held = ", ".join(map(str, devices)) or "none"
        raise UsageError(f"{reader.path}: snapshot {sid} has no device {req.device} (its devices: {held})")
    return [req.device]


def _event(reader: Library, sid: int, device: int, at: int | None) -> int | None:
    if at is None:
        return None
    n = reader.trace_length(sid, device)
    if not 0 <= at <= n:
        raise UsageError(f"{reader.path}: event {at} is out of range for snapshot {sid} device {device} "
                         f"(its trace has {n} events: events 0..{n})")
    return at


def _concat(parts: list[dict[str, object]], what: str) -> pd.DataFrame:
    """One frame of the columns of every part (dicts of equal-length columns), in COLUMNS' order and dtypes."""
    dtypes = COLUMNS[what]
    if not parts:
        return pd.DataFrame({name: pd.Series([], dtype=dtype) for name, dtype in dtypes.items()})
    frames = [pd.DataFrame({name: pd.array(part[name], dtype=dtype) for name, dtype in dtypes.items()})
              for part in parts]
    return frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)


# -- series ----------------------------------------------------------------------------------------------------

def _series(reader: Library, sid: int, device: int) -> dict[str, object]:
    series = reader.series(sid, device)
    figures = per_event(series)
    states = len(figures["allocated"])
    return {"device": np.full(states, device, np.int64), "event": np.arange(states, dtype=np.int64),
            "time_us": _state_times(reader, sid, device, states),
            "allocated_bytes": figures["allocated"], "requested_bytes": figures["requested"],
            "reserved_bytes": figures["reserved"], "free_bytes": figures["free"],
            "largest_free_block": series["largest_gap"], "non_releasable_bytes": figures["non_releasable"],
            "fragmentation": figures["fragmentation"].astype(np.float64),
            "free_scatter": figures["free_scatter"].astype(np.float64)}


def _state_times(reader: Library, sid: int, device: int, states: int) -> pd.arrays.IntegerArray:
    """The time of every state as the timeline stamps it (state K: event K - 1's, state 0: event 0's); all
    null where the trace has no times."""
    n = states - 1
    times = reader.timeline(sid, device, 0, n, max_points=states).time_us if n > 0 else None
    if times is None or len(times) != states:
        return _nullable(np.zeros(states, np.int64), np.ones(states, bool))
    return _nullable(np.asarray(times, np.int64), np.zeros(states, bool))


# -- allocations -----------------------------------------------------------------------------------------------

def _stack_facts(reader: Library, sid: int) -> tuple[StackFacts, list[str]]:
    """The snapshot's stack facts, and each stack's frames as text."""
    frames, stacks = reader.stacks(sid)
    return stack_facts(frames, stacks), [stack_text([frames[f] for f in s]) for s in stacks]


def _allocations(reader: Library, sid: int, device: int, facts: StackFacts,
                 texts: list[str]) -> dict[str, object]:
    lt = reader.lifetimes(sid, device)
    made = lt.start > 0  # made by an alloc of the trace (start 0: live before the trace began)
    end, stack = lt.end[made], lt.stack[made].astype(np.int64)
    site, kind = facts.of(stack)
    recorded = (stack >= 0) & (stack < len(texts))
    return {"device": np.full(int(made.sum()), device, np.int64), "address": lt.address[made],
            "size": lt.size[made], "requested_size": lt.requested[made], "stream": lt.stream[made],
            "start_event": lt.start[made], "end_event": _nullable(end, end >= lt.states),
            "start_us": _times_of(lt.start_us[made]), "end_us": _times_of(lt.end_us[made]),
            "site": _labels(facts.sites, site, recorded), "kind": _labels(KINDS, kind, np.ones(len(kind), bool)),
            "stack": _labels(texts, stack, recorded)}


def _labels(names: Sequence[str], index: np.ndarray, known: np.ndarray) -> pa.Array:
    """names[index] where known, else null: taken in Arrow, as a Python loop over a million rows is not."""
    return pa.array(names, pa.string()).take(pa.array(np.where(known, index, 0), pa.int64(), mask=~known))


def _times_of(values: np.ndarray) -> pd.arrays.IntegerArray:
    return _nullable(values, values == NO_TIME)


def _nullable(values: np.ndarray, missing: np.ndarray) -> pd.arrays.IntegerArray:
    return pd.arrays.IntegerArray(np.asarray(values, np.int64), np.asarray(missing, bool))


# -- segments --------------------------------------------------------------------------------------------------

def _segments(reader: Library, sid: int, device: int, at: int | None, facts: StackFacts) -> dict[str, object]:
    segments, _, _ = reader.device_state(sid, device, at)
    rows = [(seg, b) for seg in segments for b in seg.blocks]
    stacks = np.array([b.stack for _, b in rows], np.int64)
    site, _ = facts.of(stacks)
    return {"device": np.full(len(rows), device, np.int64),
           **_segment_columns([seg for seg, _ in rows]),
           "block_address": [b.address for _, b in rows], "block_size": [b.size for _, b in rows],
           "requested_size": [b.requested_size for _, b in rows], "state": [b.state.value for _, b in rows],
           "site": _labels(facts.sites, site, (stacks >= 0) & (stacks < len(facts.site)))}


def _segment_columns(segments: list[Segment]) -> dict[str, list]:
    return {"segment_address": [s.address for s in segments], "segment_size": [s.total_size for s in segments],
            "pool": [s.pool for s in segments], "stream": [s.stream for s in segments],
            "is_expandable": [s.is_expandable for s in segments]}


# -- files -----------------------------------------------------------------------------------------------------

def write_frame(frame: pd.DataFrame, fmt: str, out: str | IO) -> None:
    """Write `frame` as Parquet (pyarrow) or CSV (no index) to a path or an open file (binary for Parquet)."""
    if fmt == "parquet":
        frame.to_parquet(out, engine="pyarrow", index=False)
    elif fmt == "csv":
        spreadsheet_safe(frame).to_csv(out, index=False)
    else:
        raise UsageError(f"cannot write '{str(fmt)[:40]}': choose one of {', '.join(FORMATS)}")


def spreadsheet_safe(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with every text cell that a spreadsheet would read as a formula quoted (fragviz.base.cells)."""
    text = [c for c in frame.columns if pd.api.types.is_string_dtype(frame[c]) and not frame[c].empty]
    if not text:
        return frame
    safe = frame.copy()
    for column in text:
        safe[column] = frame[column].map(spreadsheet_text, na_action="ignore").astype(frame[column].dtype)
    return safe


def file_name(name: str, ident: str, what: str, fmt: str) -> str:
    """`<base name without its snapshot suffixes>-<ident>-<what>.<fmt>`, in characters safe in any file system
    and header."""
    base = os.path.basename(name.replace("\\", "/")) or "snapshot"
    while base.lower().endswith(SNAPSHOT_SUFFIXES) and "." in base[1:]:
        base = base[:base.rindex(".")]
    base = re.sub(r"[^A-Za-z0-9._-]+", "_", base).strip("._") or "snapshot"
    return f"{base}-{ident}-{what}.{fmt}"


def snapshot_file_name(reader: Library, sid: int, what: str, fmt: str) -> str:
    return file_name(reader.snapshot_row(sid).name, str(sid), what, fmt)


def job_file_name(reader: Library, job_id: int, what: str, fmt: str) -> str:
    return file_name(reader.job(job_id).name, f"job{job_id}", what, fmt)


def check_destination(out: str | None, fmt: str) -> None:
    """Refuse what cannot be written before any work: Parquet is binary, so never to standard output; a directory
    or a missing folder (fragviz.base.files) never."""
    if out == "-" and fmt != "csv":
        raise UsageError(f"-o - writes CSV to standard output, not {fmt}: give -o FILE, or --format csv")
    if out is not None:
        check_output(out, "-o")


def save(frame: pd.DataFrame, fmt: str, out: str, stdout: IO[str]) -> str:
    """Write `frame` to `out` as fragviz.base.files.write_output does (a file replaced whole, a FIFO or device
    written in place), or as CSV to `stdout` where `out` is "-"; where it went, in words."""
    check_destination(out, fmt)
    if out == "-":
        write_frame(frame, "csv", stdout)
        return "standard output"
    body = io.BytesIO()
    write_frame(frame, fmt, body)
    return write_output(out, body.getvalue(), "-o")
