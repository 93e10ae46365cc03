"""Human-readable byte sizes, the way PyTorch prints them."""
from __future__ import annotations

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB


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


def torch_format_size(n: int) -> str:
    """PyTorch's own `format_size` (CUDACachingAllocator.cpp): inclusive boundaries, 'bytes' spelled out."""
    if n <= KiB:
        return f"{n} bytes"
    if n <= MiB:
        return f"{n / KiB:.2f} KiB"
    if n <= GiB:
        return f"{n / MiB:.2f} MiB"
    return f"{n / GiB:.2f} GiB"
