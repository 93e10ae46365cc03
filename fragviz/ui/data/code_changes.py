"""The what-if page's code what-ifs as typed: `fragviz simulate`'s --scale, --bucket and --paged-kv
(fragviz.simulate.reshape), read from the page's three boxes."""
from __future__ import annotations

from fragviz.simulate.reshape import CodeChange, parse_bucket, parse_paged_kv, parse_scale


def entries(text: str | None) -> list[str]:
    """A box's comma-separated entries, blanks left out."""
    return [part.strip() for part in (text or "").split(",") if part.strip()]


def code_changes(scale: str | None, bucket: str | None, paged_kv: str | None) -> tuple[CodeChange, ...]:
    """The changes typed, in the order `fragviz simulate` applies its flags (scales, buckets, then paged KV); none
    where every box is blank. A UsageError with the one-line reason where an entry is not understood."""
    changes = [parse_scale(t) for t in entries(scale)] + [parse_bucket(t) for t in entries(bucket)]
    paged = (paged_kv or "").strip()
    return tuple(changes + ([parse_paged_kv(paged)] if paged else []))
