"""Gzip inflation benchmark: fragviz's bounded, streamed inflate against plain zlib, and many-member files.

  large      a gzip of real snapshot bytes (the real files' pickles, one after another, until the gzip is
             --mib MiB): fragviz.snapshot.inflate.inflate from the file, against zlib.decompress of the bytes
             (one call, no checks); the target is inflate <= 2x zlib
  members    files of only empty gzip members (20 bytes each) at 2, 4 and 8 MB: a loader that copies the rest
             of the file at each member takes time growing with the square of the size; the target is each
             size's time per MB <= 2x the smallest's (linear)

    python bench/bench_inflate.py [--mib 65] [--real ../shared/real_snapshots]
"""
from __future__ import annotations

import argparse
import glob
import gzip
import os
import sys
import tempfile
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import ROOT  # noqa: E402
from fragviz.base.errors import SnapshotFormatError  # noqa: E402
from fragviz.base.limits import Limits  # noqa: E402
from fragviz.snapshot.inflate import inflate  # noqa: E402

REAL = os.path.normpath(os.path.join(ROOT, "..", "shared", "real_snapshots"))


def large_gzip(path: str, real: str, target: int) -> int:
    """Write a gzip of real snapshot bytes of about `target` bytes; the bytes it inflates to."""
    blobs = [open(p, "rb").read() for p in sorted(glob.glob(os.path.join(real, "*.pickle")))]
    written = 0
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6) as gz:
        while raw.tell() < target:
            for blob in blobs:
                gz.write(blob)
                written += len(blob)
    return written


def timed(fn) -> tuple[float, object]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def bench_large(folder: str, real: str, mib: int) -> tuple[float, float]:
    path = os.path.join(folder, "large.gz")
    inflated = large_gzip(path, real, mib << 20)
    size = os.path.getsize(path)
    limits = Limits.current()
    with open(path, "rb") as fh:
        ours, out = timed(lambda: inflate(fh, size, "large.gz", limits))
    assert len(out) == inflated  # type: ignore[arg-type]
    del out
    data = open(path, "rb").read()
    plain, out = timed(lambda: zlib.decompress(data, 16 + zlib.MAX_WBITS))
    del out, data
    print(f"large gzip: {size / 2**20:.1f} MiB -> {inflated / 2**20:.0f} MiB: fragviz inflate {ours:.2f} s, "
          f"zlib.decompress {plain:.2f} s ({ours / plain:.2f}x)")
    return ours / plain, 2.0


def bench_members(folder: str) -> tuple[float, float]:
    empty = gzip.compress(b"", mtime=0)
    limits = Limits.current()
    per_mb = []
    for mb in (2, 4, 8):
        path = os.path.join(folder, f"members_{mb}.gz")
        with open(path, "wb") as fh:
            fh.write(empty * (mb * 1_000_000 // len(empty)))
        with open(path, "rb") as fh:
            seconds, _ = timed(lambda: inflate(fh, os.path.getsize(path), path, limits))
        per_mb.append(seconds / mb)
        print(f"{mb} MB of empty members ({mb * 1_000_000 // len(empty):,}): {seconds:.2f} s")
    return max(per_mb) / min(per_mb), 2.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=65, help="size of the large gzip (default 65 MiB)")
    ap.add_argument("--real", default=REAL, help="the real snapshots (default ../shared/real_snapshots)")
    args = ap.parse_args()
    ok = True
    with tempfile.TemporaryDirectory() as folder:
        for name, (ratio, target) in (("inflate / zlib", bench_large(folder, args.real, args.mib)),
                                      ("worst / best seconds per MB", bench_members(folder))):
            verdict = "meets" if ratio <= target else "MISSES"
            ok &= ratio <= target
            print(f"  {name:<30} {ratio:6.2f}  (target <= {target}: {verdict})")
    return 0 if ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SnapshotFormatError as exc:
        sys.exit(f"bench_inflate: {exc}")
