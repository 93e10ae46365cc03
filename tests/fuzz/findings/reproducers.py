"""The fuzz findings of issue 8, as inputs built from scratch: `python -m tests.fuzz.findings.reproducers [OUT]`
(from the repository's root).

Writes each reproducer to OUT (default: a temporary folder) and runs it through the fuzz harness's checks
in this process, printing what fragviz does with it now. See README.md beside this file.
"""
from __future__ import annotations

import os
import pickle
import struct
import sys
import tempfile
import time

from tests.fuzz.encode import Nest, to_pickle
from tests.fuzz.hostile import snapshot_template
from tests.support.helpers import REAL


def declared_4gib_bytes() -> bytes:
    """F1: 11 bytes; BINBYTES declares 4 GiB; the C unpickler allocates it before it reads."""
    return b"\x80\x04B\xff\xff\xff\xffabc."


def declared_2e62_bytearray() -> bytes:
    """F1: 12 bytes; BYTEARRAY8 declares 2^62 bytes (allocation fails at once, whatever the memory)."""
    return b"\x80\x04\x96" + struct.pack("<Q", 1 << 62) + b"."


def deep_annotation_message() -> bytes:
    """F2: an annotation nested 65 dicts deep under 40-character keys: the refusal is 2,860 characters long."""
    snap = snapshot_template()
    snap["external_annotations"][0] = Nest(65, 1, "dict")
    data = to_pickle(snap, 4)
    return data.replace(b"\x8c\x01k", b"\x8c\x28" + b"k" * 40)  # the nest's key, 40 characters


def event_size_int64_max() -> bytes:
    """F3: one trace event of size 2^63-1 (in range for int64, so parse accepts it): replay overflows."""
    snap = snapshot_template()
    snap["device_traces"][0][1]["size"] = 2 ** 63 - 1
    return pickle.dumps(snap, protocol=4)


def block_size_int64_max() -> bytes:
    """F3: a block of size 2^63-1 in the final state: the same overflow."""
    snap = snapshot_template()
    snap["segments"][0]["blocks"][0]["size"] = 2 ** 63 - 1
    return pickle.dumps(snap, protocol=4)


def cyclic_settings_message() -> bytes:
    """F2: a dict that holds itself (a memo reference): refused for depth, with a 600-character path."""
    return (b"(dVallocator_settings\n(dVroundup_power2_divisions\n(dp0\nV128\ng0\nsss"
            b"Vsegments\n(lsVdevice_traces\n(l(las.")


def gzip_members_bomb() -> bytes:
    """F4: 80 gzip members of 64 MiB of zeros each (5.2 MB): inflated to the 200x ratio cap (1 GiB) first."""
    from tests.fuzz.gzip_cases import bomb_member

    return bomb_member(64 << 20) * 80


def memo_index_150m() -> bytes:
    """F5: a valid snapshot whose first opcode memoises None at index 150,000,000 (LONG_BINPUT).

    CPython's C unpickler grows its memo table to twice the largest index and zero-fills it: 2.4 GB of RSS
    for a 1.6 KB file that then loads. Under RLIMIT_AS a bigger index fails to allocate at once and fragviz
    falls back to the pure-Python unpickler, so only an index that fits shows the cost.
    """
    return b"\x80\x04Nr" + struct.pack("<I", 150_000_000) + b"0" + to_pickle(snapshot_template(), 4)[2:]


REPRODUCERS = {
    "F1-declared-4GiB-binbytes.pickle": declared_4gib_bytes,
    "F1-declared-2e62-bytearray8.pickle": declared_2e62_bytearray,
    "F2-deep-annotations-long-message.pickle": deep_annotation_message,
    "F3-event-size-int64-max.pickle": event_size_int64_max,
    "F3-block-size-int64-max.pickle": block_size_int64_max,
    "F2-cyclic-settings-long-message.pickle": cyclic_settings_message,
    "F4-gzip-80-members-1GiB.pickle.gz": gzip_members_bomb,
    "F5-memo-index-150M.pickle": memo_index_150m,
}


def _peak() -> float:
    from tests.fuzz.harness import _peak_mb

    return _peak_mb()


def main(out: str) -> None:
    import resource

    from tests.fuzz.harness import BASELINE_SNAPSHOT, Failure, _Checker
    from fragviz.library.ingest import ingest_file
    from fragviz.store.engine import open_store

    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
    os.makedirs(out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="fragviz-findings-")
    baseline = os.path.join(work, "baseline.sqlite")
    conn = open_store(baseline)
    ingest_file(conn, os.path.join(REAL, BASELINE_SNAPSHOT))
    conn.close()
    for name, build in REPRODUCERS.items():
        data = build()
        with open(os.path.join(out, name), "wb") as fh:
            fh.write(data)
        checker = _Checker(baseline, work, "full")
        t0 = time.monotonic()
        before = _peak()
        checker.run(data, name)
        took = time.monotonic() - t0
        if _peak() > before + 1024:
            checker.failures.append(Failure("memory", "any", "peak-rss", "", f"peak RSS {_peak():.0f} MB"))
        verdict = "; ".join(f.describe() for f in checker.failures) or "passes"
        print(f"{name} ({len(data)} bytes, {took:.1f} s): {verdict}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="fragviz-findings-out-"))
