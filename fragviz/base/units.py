"""Human-readable byte sizes, the way PyTorch prints them."""
from __future__ import annotations

import re

from fragviz.base.errors import UsageError

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

# The caching allocator's size constants (c10/cuda/CUDACachingAllocator.cpp, reference C.1): one place for
# every room that rounds, pools or pages by them.
MIN_BLOCK = 512  # kMinBlockSize: every block is a multiple of it
SMALL_SIZE = 1 * MiB  # kSmallSize: rounded requests up to this go to the small pool
SMALL_BUFFER = 2 * MiB  # kSmallBuffer: a small-pool segment; the small pool's page of an expandable segment
LARGE_BUFFER = 20 * MiB  # kLargeBuffer: a large-pool segment for requests up to 10 MiB; a large page
MIN_LARGE_ALLOC = 10 * MiB  # kMinLargeAlloc
ROUND_LARGE = 2 * MiB  # kRoundLarge: larger segments are rounded up to it


def format_bytes(n: int | float) -> str:
    """Format a byte count with binary units: '512 B', '1.50 MiB', '79.10 GiB'."""
    sign = "-" if n < 0 else ""
    n = abs(n)
    if n < KiB:
        return f"{sign}{int(n)} B"
    if n < MiB:
        return f"{sign}{n / KiB:.2f} KiB"
    if n < GiB:
        return f"{sign}{n / MiB:.2f} MiB"
    return f"{sign}{n / GiB:.2f} GiB"


def counted(n: int, noun: str) -> str:
    """'1 gap', '3 gaps': a count with its noun, plural when the count is not one."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def torch_format_size(n: int) -> str:
    """PyTorch's own `format_size` (CUDACachingAllocator.cpp): inclusive boundaries, 'bytes' spelled out."""
    if n <= KiB:
        return f"{n} bytes"
    if n <= MiB:
        return f"{n / KiB:.2f} KiB"
    if n <= GiB:
        return f"{n / MiB:.2f} MiB"
    return f"{n / GiB:.2f} GiB"


_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1024, "m": 1000**2, "mb": 1000**2, "mib": 1024**2,
          "g": 1000**3, "gb": 1000**3, "gib": 1024**3, "t": 1000**4, "tb": 1000**4, "tib": 1024**4}
_SECONDS = {"": 1.0, "s": 1.0, "ms": 0.001, "m": 60.0, "min": 60.0, "h": 3600.0}


def parse_size(text: str) -> int:
    """'80GiB', '80 GB', '81920MiB', '8589934592' -> bytes."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", text)
    unit = m.group(2).lower() if m else ""
    if not m or unit not in _UNITS:
        raise UsageError(f"'{text[:80]}' is not a size: use a number with B, KiB, MiB, GiB, TiB (or KB, MB, GB, TB)")
    value = float(m.group(1)) * _UNITS[unit]
    if not value < 2**63:  # infinity too (a number of hundreds of digits): no device or block is that large
        raise UsageError(f"'{cut(text, 40)}' is too large a size: at most 8 EiB (2^63 - 1 bytes)")
    return int(value)


def parse_duration(text: str) -> float:
    """'1s', '500ms', '2m', '1h', '0.5' (seconds) -> seconds, > 0."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", text)
    unit = m.group(2).lower() if m else ""
    if not m or unit not in _SECONDS or float(m.group(1)) <= 0:
        raise UsageError(f"'{text[:80]}' is not a duration: use a positive number with ms, s, m or h (e.g. 1s, 500ms)")
    return float(m.group(1)) * _SECONDS[unit]


def bytes_text(data: bytes) -> str:
    """Raw bytes as quoted text for a message: printable ASCII as it is, every other byte as \\xNN (never b'...')."""
    return '"' + "".join(chr(c) if 32 <= c < 127 and c not in (34, 92) else f"\\x{c:02x}" for c in data) + '"'


def cut(text: str, limit: int = 80) -> str:
    """`text` on one line and at most `limit` characters: how a bad value is shown in an error message."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
