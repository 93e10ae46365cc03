"""Which rank of a job each snapshot file holds: from its name, else from the snapshot, else as given.

A rank is read from the file's base name first: `rank3`, `rank_3`, `rank-3`, `rank03` anywhere in it (not
after another letter, so `cranky3` is none), else a number at the end after `_` or `-` (`dump_2.pickle`,
`snap-3.pickle.gz`). A name without one is opened: a rank in the trace entries' `user_metadata`
(`rank=3`, `rank: 3`, `{"rank": 3}`; not `local_rank`), where every entry that names one agrees, else the
snapshot's device index when it has exactly one device.
"""
from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass

from fragviz.base.errors import UsageError

# What `fragviz ingest --job DIR` takes from a directory: what the loader reads (it sniffs the content, so
# these are conventions, not limits): pickles, JSON, each maybe gzip-compressed.
SNAPSHOT_SUFFIXES = (".pickle", ".pkl", ".json", ".pickle.gz", ".pkl.gz", ".json.gz", ".gz")
_NAMED_RANK = re.compile(r"(?<![a-z])rank[_-]?(\d+)(?!\d)", re.IGNORECASE)
_TRAILING_NUMBER = re.compile(r"[_-](\d+)$")
_METADATA_RANK = re.compile(r"(?<![a-z])(?<!local_)rank[\"']?\s*[:=]?\s*(\d+)", re.IGNORECASE)
_GLOB_CHARS = re.compile(r"[*?\[]")


@dataclass(frozen=True)
class RankedFile:
    """One file of a job and its rank (None where neither the name nor the snapshot tells it)."""
    path: str
    rank: int | None
    source: str  # how the rank was found: "name", "metadata", "device", "option", or why it was not


def rank_from_name(path: str) -> int | None:
    """The rank a file's base name carries (see the module's docstring), or None."""
    base = os.path.basename(path)
    named = _NAMED_RANK.search(base)
    if named:
        return int(named.group(1))
    trailing = _TRAILING_NUMBER.search(_strip_suffix(base))
    return int(trailing.group(1)) if trailing else None


def _strip_suffix(base: str) -> str:
    for suffix in sorted(SNAPSHOT_SUFFIXES, key=len, reverse=True):
        if base.lower().endswith(suffix):
            return base[: -len(suffix)]
    return os.path.splitext(base)[0]


def rank_from_metadata(strings: list[str]) -> int | None:
    """The one rank the trace's `user_metadata` strings name; None when none names one or they disagree."""
    ranks = {int(m.group(1)) for s in strings for m in [_METADATA_RANK.search(s)] if m}
    return ranks.pop() if len(ranks) == 1 else None


def rank_from_snapshot(path: str) -> RankedFile:
    """Open the snapshot at `path` for its rank: its user metadata's, else its single device's index.
    A file that cannot be read raises its SnapshotFormatError."""
    from fragviz.model import NO_STRING
    from fragviz.snapshot import load_snapshot

    snapshot = load_snapshot(path)
    indexes = {int(i) for t in snapshot.traces.values() for i in set(t.user_metadata.tolist()) if i != NO_STRING}
    rank = rank_from_metadata([snapshot.strings[i] for i in sorted(indexes) if 0 <= i < len(snapshot.strings)])
    if rank is not None:
        return RankedFile(path, rank, "metadata")
    devices = snapshot.devices()
    if len(devices) == 1:
        return RankedFile(path, devices[0], "device")
    return RankedFile(path, None, f"{path}: cannot tell its rank: the name carries none (rank3, rank_3, _3.pickle), "
                                  f"its user metadata names none and it has {len(devices)} devices; rename it "
                                  "or ingest it alone with --rank N")


def job_files(patterns: list[str]) -> list[str]:
    """The snapshot files that directories, globs and file paths name, each once, in name order."""
    found: list[str] = []
    for pattern in patterns:
        matched = _files_of(pattern)
        if not matched:
            raise UsageError(f"{pattern}: no snapshot files there (a directory of *.pickle, *.pickle.gz, *.pkl or "
                             "*.json files, a quoted glob, or a file)")
        found.extend(m for m in matched if m not in found)
    return found


def _files_of(pattern: str) -> list[str]:
    if os.path.isdir(pattern):
        names = sorted(n for n in os.listdir(pattern) if n.lower().endswith(SNAPSHOT_SUFFIXES))
        return [p for p in (os.path.join(pattern, n) for n in names) if os.path.isfile(p)]
    if os.path.exists(pattern) or not _GLOB_CHARS.search(pattern):
        return [pattern] if os.path.exists(pattern) else []
    return sorted(p for p in glob.glob(pattern) if os.path.isfile(p))


def refuse_shared_ranks(files: list[RankedFile]) -> None:
    """Raise a UsageError naming both files when two files claim one rank."""
    seen: dict[int, str] = {}
    for f in files:
        if f.rank is None:
            continue
        if f.rank in seen:
            raise UsageError(f"rank {f.rank} is claimed by both {seen[f.rank]} and {f.path}: nothing was ingested; "
                             "rename one, or ingest them as separate jobs")
        seen[f.rank] = f.path

