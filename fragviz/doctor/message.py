"""Reading "CUDA out of memory" messages of every PyTorch era into numbers (reference C.15, and the forms
collected in real_snapshots/text/oom_messages.md)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

_SIZE = r"([0-9]+(?:\.[0-9]+)?)\s*(bytes|B|KiB|MiB|GiB|TiB)"
_UNITS = {"bytes": 1, "B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, "TiB": 1024**4}


def _bytes(number: str, unit: str) -> int:
    return int(round(float(number) * _UNITS[unit]))


def _find(pattern: str, text: str) -> int | None:
    m = re.search(pattern.replace("{S}", _SIZE), text)
    return _bytes(m.group(1), m.group(2)) if m else None


@dataclass
class OomMessage:
    """The figures one OOM message gives; None where its era's wording does not say."""

    text: str
    era: str  # "thc", "driver", "1.0", "1.5", "2.1+"
    requested: int | None = None  # "Tried to allocate": the segment size the allocator asked the device for
    device: int | None = None
    total: int | None = None
    free: int | None = None
    allocated: int | None = None
    reserved: int | None = None
    allowed: int | None = None
    private_pools: int | None = None
    this_process: int | None = None  # "Including non-PyTorch memory, this process has X in use"
    other_processes: list[int] = field(default_factory=list)  # "Process N has X memory in use"


def find_messages(text: str) -> list[str]:
    """Split pasted text into the OOM messages it holds (one per line is the common case)."""
    out = []
    for line in text.splitlines() or [text]:
        if re.search(r"out of memory", line, re.I):
            out.append(line.strip())
    return out


def parse_message(text: str) -> OomMessage | None:
    """Figures of one message; None if the text is no CUDA out-of-memory message."""
    if re.search(r"cuda runtime error \(2\)\s*:\s*out of memory|THCudaCheck FAIL.*out of memory", text, re.I):
        return OomMessage(text, "thc")
    if "Tried to allocate" not in text:
        if re.search(r"CUDA error: out of memory", text):
            return OomMessage(text, "driver")
        return None
    msg = OomMessage(text, "2.1+" if "has a total capac" in text else "1.x", _find(r"Tried to allocate {S}", text))
    m = re.search(r"GPU (\d+)", text)
    msg.device = int(m.group(1)) if m else None
    if msg.era == "2.1+":
        _modern(msg, text)
    else:
        _legacy(msg, text)
    return msg


def _modern(msg: OomMessage, text: str) -> None:
    msg.total = _find(r"total capac(?:i)?ty of {S}", text)
    msg.free = _find(r"of which {S} is free", text)
    msg.allowed = _find(r"{S} allowed;", text)
    msg.this_process = _find(r"this process has {S} memory in use", text)
    msg.other_processes = [_bytes(n, u) for n, u in re.findall(r"Process \d+ has " + _SIZE + " memory in use", text)]
    msg.allocated = _find(r"Of the allocated memory {S} is allocated by PyTorch", text)
    msg.private_pools = _find(r"with {S} allocated in private pools", text)
    unallocated = _find(r"and {S} is reserved by PyTorch but unallocated", text)
    if msg.allocated is not None and unallocated is not None:
        msg.reserved = msg.allocated + unallocated


def _legacy(msg: OomMessage, text: str) -> None:
    msg.total = _find(r"{S} total capacity", text)
    msg.allocated = _find(r"{S} already allocated", text)
    msg.free = _find(r"{S} free", text)
    msg.allowed = _find(r"{S} allowed", text)
    msg.reserved = _find(r"{S} reserved in total by PyTorch", text)
    if msg.reserved is not None:
        msg.era = "1.5"
        return
    cached = _find(r"{S} cached", text)  # 1.0-1.4: cached but unallocated
    msg.era = "1.0"
    if cached is not None and msg.allocated is not None:
        msg.reserved = msg.allocated + cached
