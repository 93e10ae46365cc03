"""The timeline store's tables (one schema for SQLite and PostgreSQL, as SQLAlchemy Core tables), its version,
and its migrations.

Version 1 tables:
  meta(key, value)                  schema_version and the fragviz version that created the store
  snapshots                         one row per ingested file: name, content hash (unique), format,
                                    warnings, allocator settings, annotations, provenance (for snapshots
                                    fragviz made), summary (fragviz.store.records.Summary as JSON)
  frames, stacks                    every distinct frame and stack once, shared by all snapshots
  snapshot_stacks                   a snapshot's own stack numbering -> stacks.id
  devices                           per snapshot and device: trace length, action names, replay facts
  segments, blocks                  the final state as recorded in the file
  trace_chunks                      the trace in chunks of equal size (fragviz.library.stored.CHUNK_EVENTS), columnar blobs (fragviz.model.columns)
  series_chunks                     per-event figures after each event, same chunking (n + 1 states)
  series_lod                        the same summarised as min/max per bucket of 16, 64, 256... events
  checkpoints                       the replayed state after every CHUNK_EVENTS events, columnar blobs
Everything a snapshot owns references snapshots(id) ON DELETE CASCADE, so deleting a row removes it whole.

Version 2 adds live recording (fragviz attach, the dashboard's live page):
  live_attachments                  one row per watched agent (target, first pid, simulated, rank), with
                                    when it started, was last heard from, and ended
  live_samples                      one row per poll and device: the agent's /v1/stats figures; `gap` is 1 on
                                    the first sample after the agent could not be reached
  live_events                       what happened: disconnected, reconnected, restarted (a new pid), oom,
                                    snapshot (with the id of the snapshot taken into the library)
  live_state                        the latest segments per attachment and device (compact JSON), for live pages
Version 3 adds what holds memory over time:
  allocations                       per snapshot and device: every allocation of the trace with the states it
                                    is live in, its sizes, stack, address and times (fragviz.usage.lifetimes),
                                    columnar; snapshots stored before version 3 have none (read from the trace)
Version 4 adds jobs of many ranks, and the summary becomes the store's own versioned record:
  jobs                              one row per job (its name is unique)
  job_ranks                         (job, rank) -> snapshot
  summaries stored before version 4 are report objects, read as Summary version 0 (fragviz.store.records)
Version 5 changes what fragmentation means (non-releasable / reserved bytes, fragviz.model.metrics) and adds the
non-releasable bytes to the series:
  stale_figures                     snapshots whose series, level-of-detail tables and summary were stored before
                                    that: every snapshot of an older store. fragviz.library.upgrade recomputes them from the
                                    stored trace and checkpoints and removes the row, one snapshot at a time
  live_samples.non_releasable       (the agent's non_releasable_bytes; older samples take their inactive_split)

STEPS[v] are the tables version v adds; a store is brought from version v to v + 1 in one transaction when
it is opened for writing (or, for reading, when it can be written).
"""
from __future__ import annotations

from typing import Callable

from sqlalchemy import (BigInteger, Column, Connection, Float, ForeignKey, ForeignKeyConstraint, Index, Integer,
                        LargeBinary, MetaData, PrimaryKeyConstraint, Table, Text, UniqueConstraint, inspect, select,
                        text)

SCHEMA_VERSION = 5

metadata = MetaData()


def _owned(name: str, *columns, key: tuple[str, ...]) -> Table:
    """A table of rows a snapshot owns: removed with it."""
    return Table(name, metadata,
                 Column("snapshot_id", Integer, ForeignKey("snapshots.id", ondelete="CASCADE"), nullable=False),
                 *columns, PrimaryKeyConstraint("snapshot_id", *key))


meta = Table("meta", metadata, Column("key", Text, primary_key=True), Column("value", Text, nullable=False))
snapshots = Table(
    "snapshots", metadata,
    Column("id", Integer, primary_key=True),
    Column("name", Text, nullable=False),
    Column("content_hash", Text, nullable=False, unique=True),
    Column("file_size", BigInteger, nullable=False),
    Column("added_at", Text, nullable=False),
    Column("format", Text, nullable=False),
    Column("warnings", Text, nullable=False),
    Column("allocator_settings", Text),
    Column("external_annotations", Text),
    Column("strings", Text, nullable=False),
    Column("provenance", Text),
    Column("summary", Text, nullable=False))
frames = Table("frames", metadata, Column("id", Integer, primary_key=True),
               Column("filename", Text, nullable=False), Column("line", BigInteger, nullable=False),
               Column("name", Text, nullable=False), UniqueConstraint("filename", "line", "name"))
stacks = Table("stacks", metadata, Column("id", Integer, primary_key=True),
               Column("digest", LargeBinary, nullable=False, unique=True),
               Column("frame_ids", LargeBinary, nullable=False))
snapshot_stacks = _owned("snapshot_stacks", Column("local_id", Integer, nullable=False),
                         Column("stack_id", Integer, ForeignKey("stacks.id"), nullable=False), key=("local_id",))
devices = _owned("devices", Column("device", Integer, nullable=False),
                 Column("trace_events", BigInteger, nullable=False), Column("action_names", Text, nullable=False),
                 Column("pre_trace_blocks", BigInteger, nullable=False),
                 Column("pre_trace_segments", BigInteger, nullable=False), Column("warnings", Text, nullable=False),
                 key=("device",))
segments = _owned("segments", Column("device", Integer, nullable=False), Column("ord", Integer, nullable=False),
                  Column("address", BigInteger, nullable=False), Column("total_size", BigInteger, nullable=False),
                  Column("stream", BigInteger, nullable=False), Column("pool", Text, nullable=False),
                  Column("pool_id_a", BigInteger), Column("pool_id_b", BigInteger), Column("is_expandable", Integer),
                  Column("stack", BigInteger, nullable=False), key=("device", "ord"))
blocks = _owned("blocks", Column("device", Integer, nullable=False), Column("segment_ord", Integer, nullable=False),
                Column("ord", Integer, nullable=False), Column("address", BigInteger, nullable=False),
                Column("size", BigInteger, nullable=False), Column("requested_size", BigInteger, nullable=False),
                Column("state", Text, nullable=False), Column("stack", BigInteger, nullable=False),
                key=("device", "segment_ord", "ord"))


def _blobs(name: str, key: str) -> Table:
    return _owned(name, Column("device", Integer, nullable=False), Column(key, BigInteger, nullable=False),
                  Column("data", LargeBinary, nullable=False), key=("device", key))


trace_chunks = _blobs("trace_chunks", "chunk")
series_chunks = _blobs("series_chunks", "chunk")
series_lod = _blobs("series_lod", "bucket")
checkpoints = _blobs("checkpoints", "event")
V1 = (meta, snapshots, frames, stacks, snapshot_stacks, devices, segments, blocks, trace_chunks, series_chunks,
      series_lod, checkpoints)

live_attachments = Table(
    "live_attachments", metadata, Column("id", Integer, primary_key=True),
    Column("target", Text, nullable=False), Column("owner", Text, nullable=False), Column("pid", BigInteger),
    Column("simulated", Integer), Column("rank", Integer), Column("started_at", Float, nullable=False),
    Column("last_seen", Float), Column("ended_at", Float))


def _attachment() -> ForeignKey:
    return ForeignKey("live_attachments.id", ondelete="CASCADE")


SAMPLE_FIGURES = ("allocated", "requested", "reserved", "active", "inactive_split", "alloc_retries", "ooms")
live_samples = Table(
    "live_samples", metadata, Column("id", Integer, primary_key=True),
    Column("attachment_id", Integer, _attachment(), nullable=False),
    Column("t", Float, nullable=False), Column("device", Integer, nullable=False),
    Column("pid", BigInteger, nullable=False), Column("gap", Integer, nullable=False),
    *(Column(name, BigInteger, nullable=False) for name in SAMPLE_FIGURES),
    Column("device_total", BigInteger), Column("device_free", BigInteger), Column("nvml_used", BigInteger),
    Column("largest_free", BigInteger, nullable=False), Column("fragmentation", Float, nullable=False),
    Column("non_releasable", BigInteger),  # version 5 (before it, fragmentation was the free scatter)
    Index("live_samples_by_attachment", "attachment_id", "id"))
live_events = Table(
    "live_events", metadata, Column("id", Integer, primary_key=True),
    Column("attachment_id", Integer, _attachment(), nullable=False),
    Column("t", Float, nullable=False), Column("kind", Text, nullable=False), Column("detail", Text, nullable=False),
    Column("snapshot_id", Integer, ForeignKey("snapshots.id", ondelete="SET NULL")),
    Index("live_events_by_attachment", "attachment_id", "id"))
live_state = Table(
    "live_state", metadata, Column("attachment_id", Integer, _attachment(), nullable=False),
    Column("device", Integer, nullable=False), Column("t", Float, nullable=False),
    Column("segments", Text, nullable=False), PrimaryKeyConstraint("attachment_id", "device"))
V2 = (live_attachments, live_samples, live_events, live_state)

allocations = _owned("allocations", Column("device", Integer, nullable=False),
                     Column("data", LargeBinary, nullable=False), key=("device",))
V3 = (allocations,)

jobs = Table("jobs", metadata, Column("id", Integer, primary_key=True), Column("name", Text, nullable=False, unique=True),
             Column("created_at", Text, nullable=False))
job_ranks = Table(
    "job_ranks", metadata, Column("job_id", Integer, nullable=False), Column("rank", Integer, nullable=False),
    Column("snapshot_id", Integer, nullable=False), PrimaryKeyConstraint("job_id", "rank"),
    ForeignKeyConstraint(["job_id"], ["jobs.id"], ondelete="CASCADE"),
    ForeignKeyConstraint(["snapshot_id"], ["snapshots.id"], ondelete="CASCADE"))
V4 = (jobs, job_ranks)

stale_figures = _owned("stale_figures", key=())
V5 = (stale_figures,)


def _to_version_5(conn: Connection) -> None:
    """Every stored snapshot's figures are stale; live samples gain their non-releasable bytes, which the agents
    reported as inactive_split (memory_stats()'s own figure), and fragmentation takes its new meaning from it."""
    conn.execute(stale_figures.insert().from_select(["snapshot_id"], select(snapshots.c.id)))
    if "non_releasable" not in {c["name"] for c in inspect(conn).get_columns("live_samples")}:  # made before 5
        conn.execute(text("ALTER TABLE live_samples ADD COLUMN non_releasable BIGINT"))
    conn.execute(text("UPDATE live_samples SET non_releasable = inactive_split, fragmentation = CASE WHEN "
                      "reserved > 0 THEN CAST(inactive_split AS FLOAT) / reserved ELSE 0 END"))


# STEPS[v]: the tables version v adds (a store at version v - 1 is brought to v by creating them), then
# FILLS[v], where the step also rewrites rows, in the same transaction
STEPS: dict[int, tuple[Table, ...]] = {1: V1, 2: V2, 3: V3, 4: V4, 5: V5}
FILLS: dict[int, Callable[[Connection], None]] = {5: _to_version_5}
