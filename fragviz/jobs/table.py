"""A job's figures per rank and device, from the stored summaries alone (no trace is read): what the job page
and its CSV show."""
from __future__ import annotations

import csv
import io
from dataclasses import dataclass, replace
from typing import Iterable, Mapping

from fragviz.base.cells import spreadsheet_text
from fragviz.jobs.stats import imbalance, outliers
from fragviz.store.records import DeviceSummary, Job, Summary


@dataclass(frozen=True)
class RankRow:
    """One device of one rank's snapshot; a figure its stored summary lacks (an older fragviz) is None."""
    rank: int
    device: int | None  # None: the snapshot has no device at all
    snapshot_id: int
    name: str
    peak_reserved_bytes: int | None = None
    peak_requested_bytes: int | None = None
    fragmentation_at_peak: float | None = None
    ooms: int = 0
    verdicts: tuple[str, ...] | None = None
    reserved_outlier: bool = False
    requested_outlier: bool = False

    @property
    def outlier(self) -> bool:
        return self.reserved_outlier or self.requested_outlier


@dataclass(frozen=True)
class JobFigures:
    job: Job
    rows: tuple[RankRow, ...]
    reserved_imbalance: float | None  # max / median of the rows' peak reserved bytes
    requested_imbalance: float | None
    multi_device: frozenset[int]  # snapshot ids with more than one device

    def label(self, row: RankRow) -> str:
        """`rank 3`, or `rank 3 cuda:1` where the rank's snapshot has several devices."""
        return f"rank {row.rank}" + (f" cuda:{row.device}" if row.snapshot_id in self.multi_device else "")

    @property
    def ooms(self) -> int:
        return sum(r.ooms for r in self.rows)

    def largest(self) -> RankRow | None:
        """The row of most peak reserved bytes."""
        known = [r for r in self.rows if r.peak_reserved_bytes is not None]
        return max(known, key=lambda r: (r.peak_reserved_bytes, -r.rank)) if known else None

    def median_row(self) -> RankRow | None:
        """The row at the median of peak reserved bytes (the lower middle one of an even count)."""
        known = sorted((r for r in self.rows if r.peak_reserved_bytes is not None),
                       key=lambda r: (r.peak_reserved_bytes, r.rank))
        return known[(len(known) - 1) // 2] if known else None

    def worst_oom(self) -> RankRow | None:
        """The row with the most OOMs (the lowest rank among equals), or None when no rank ran out of memory."""
        hit = [r for r in self.rows if r.ooms]
        return max(hit, key=lambda r: (r.ooms, -r.rank)) if hit else None


def job_figures(job: Job, summaries: Mapping[int, Summary]) -> JobFigures:
    """Every (rank, device) of `job` with its figures, given each rank's snapshot summary by snapshot id; the
    outliers of peak reserved and of peak requested marked (fragviz.jobs.stats.OUTLIER_RULE)."""
    rows = [row for r in job.ranks for row in _rows(r.rank, r.snapshot_id, r.name, summaries.get(r.snapshot_id))]
    rows = _marked(rows)
    multi = frozenset(s for s, summary in summaries.items() if summary is not None and len(summary.devices) > 1)
    return JobFigures(job, tuple(rows), imbalance(_known(rows, "peak_reserved_bytes")),
                      imbalance(_known(rows, "peak_requested_bytes")), multi)


def _rows(rank: int, sid: int, name: str, summary: Summary | None) -> list[RankRow]:
    if summary is None or not summary.devices:
        return [RankRow(rank, None, sid, name)]
    return [_row(rank, sid, name, d) for d in summary.devices]


def _row(rank: int, sid: int, name: str, d: DeviceSummary) -> RankRow:
    return RankRow(rank, d.device, sid, name, d.peak_reserved_bytes, d.peak_requested_bytes,
                   d.fragmentation_at_peak, d.ooms, d.verdicts)


def _known(rows: Iterable[RankRow], figure: str) -> list[float]:
    return [getattr(r, figure) for r in rows if getattr(r, figure) is not None]


def _marked(rows: list[RankRow]) -> list[RankRow]:
    flags = {}
    for figure, flag in (("peak_reserved_bytes", "reserved_outlier"), ("peak_requested_bytes", "requested_outlier")):
        known = [r for r in rows if getattr(r, figure) is not None]
        for r, out in zip(known, outliers([getattr(r, figure) for r in known])):
            flags.setdefault(id(r), {})[flag] = out
    return [replace(r, **flags.get(id(r), {})) for r in rows]



def job_figures_of(reader, job_id: int) -> JobFigures:
    """A stored job's figures: its ranks and their snapshots' summaries, read through a StoreReader."""
    job = reader.job(job_id)
    return job_figures(job, {r.snapshot_id: reader.snapshot_row(r.snapshot_id).summary for r in job.ranks})


CSV_COLUMNS = ("rank", "device", "snapshot_id", "name", "peak_reserved_bytes", "peak_requested_bytes",
               "fragmentation_at_peak", "ooms", "verdicts", "reserved_outlier", "requested_outlier")


def ranks_csv(figures: JobFigures) -> str:
    """The per-rank table as CSV: one line per (rank, device); a figure not recorded is an empty cell, a name a
    spreadsheet would read as a formula is quoted (fragviz.base.cells)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for r in figures.rows:
        cells = {**{c: getattr(r, c) for c in CSV_COLUMNS if c != "verdicts"},
                 "verdicts": None if r.verdicts is None else " ".join(r.verdicts)}
        writer.writerow(["" if cells[c] is None else spreadsheet_text(cells[c]) if isinstance(cells[c], str)
                         else cells[c] for c in CSV_COLUMNS])
    return out.getvalue()
