"""What a file holds, told from its first bytes: gzip, a pickle, JSON, or something to name in a refusal."""
from __future__ import annotations

from fragviz.base.errors import SnapshotFormatError
from fragviz.base.units import bytes_text

GZIP_MAGIC = b"\x1f\x8b"
UTF8_BOM = b"\xef\xbb\xbf"  # JSON written by some Windows tools starts with it; Python's parser skips it
# Opcodes a protocol 0 or 1 pickle of a dict or list (or a hostile one) can start with.
OLD_PROTOCOL_STARTS = (b"(", b"]", b"}", b"c", b"i", b"R")

_SIGNATURES = (
    (b"\x89PNG", "a PNG image"), (b"\xff\xd8\xff", "a JPEG image"), (b"GIF8", "a GIF image"),
    (b"%PDF", "a PDF document"), (b"PK\x03\x04", "a zip archive"), (b"\x7fELF", "an ELF binary"),
    (b"BZh", "a bzip2 archive"), (b"\xfd7zXZ", "an xz archive"), (b"<", "an HTML or XML document"),
)


def payload_kind(head: bytes) -> str | None:
    """"pickle" or "json" for the first bytes of a payload (after any gzip), None for anything else."""
    if head[:1] == b"\x80" or head[:1] in OLD_PROTOCOL_STARTS:  # protocols 0 and 1 have no PROTO opcode
        return "pickle"
    if head.removeprefix(UTF8_BOM).lstrip()[:1] in (b"{", b"["):
        return "json"
    return None


def check_inflated_head(head: bytes, source: str) -> None:
    """Refuse a gzip stream whose first inflated bytes are not a snapshot, before inflating the rest."""
    if head and payload_kind(head) is None:
        raise SnapshotFormatError(source, f"is gzip-compressed but does not hold a snapshot: {describe(head)}")


def describe(data: bytes) -> str:
    """What content that is not a snapshot looks like, for a refusal."""
    for magic, what in _SIGNATURES:
        if data.lstrip()[: len(magic)] == magic:
            return f"the content is {what}"
    return f"unrecognised content starting with {bytes_text(data[:8])}"
