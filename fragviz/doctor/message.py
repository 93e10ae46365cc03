"""Reading "CUDA out of memory" messages of every PyTorch era into numbers (reference C.15, and the forms
collected in real_snapshots/text/oom_messages.md), ROCm's "HIP out of memory" and the cudaMallocAsync backend's
"Allocation on device N would exceed allowed memory" too.

Figures are read from the message's compact form (`paste.compact`: lower case, no whitespace), so the case of a
word ("reserved in total by Pytorch"), a wrap, a repeated space or a cut inside a word hides none. What the
message's era prints but could not be read is named in `unread`, so a verdict never rests on a figure that is
not there.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from fragviz.doctor.paste import clean_lines, compact, find_messages
from fragviz.base.units import GiB

__all__ = ["OomMessage", "ProcessUse", "close", "find_messages", "parse_message"]

_SIZE = r"([0-9]+(?:\.[0-9]+)?)(bytes|kib|mib|gib|tib)"
_UNITS = {"bytes": 1, "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4}
TOLERANCE = 0.006  # "22.25 GiB" stands for anything within 0.005 GiB of it: 0.5 % of a figure of 1.00 or more
# What the job's own process holds beyond what PyTorch reserves: the CUDA context, cuBLAS/cuDNN workspaces,
# NCCL buffers. A listed process within this much above the reserved figure can be the job itself (in a
# container NVML gives host pids, so PyTorch lists its own process as "Process N has X memory in use").
JOB_OVERHEAD = 3 * GiB
# The names of the figures, as the warnings say them.
FIGURES = {"requested": "the request (Tried to allocate)", "device": "the GPU number", "total": "the device total",
           "free": "the device's free memory", "allocated": "the memory allocated by PyTorch",
           "reserved": "the memory reserved by PyTorch"}
_EXPECTED = {"2.1+": ("requested", "device", "total", "free", "allocated", "reserved"),
             "1.5": ("requested", "device", "total", "allocated", "free", "reserved"),
             "1.0": ("requested", "device", "total", "allocated", "free", "reserved"),
             "1.x": ("requested", "device", "total", "allocated", "free", "reserved"),
             "async": ("requested", "device", "total", "free", "allocated")}


def close(a: int, b: int) -> bool:
    """Whether two printed figures can stand for the same number (two decimals of their unit)."""
    return abs(a - b) <= TOLERANCE * max(a, b) + 1024


@dataclass(frozen=True)
class ProcessUse:
    """A `Process N has X memory in use` entry; `own` when it is the job itself."""

    pid: int
    bytes: int
    own: bool = False

    def as_dict(self) -> dict[str, int | bool]:
        return {"pid": self.pid, "bytes": self.bytes, "own": self.own}


@dataclass(frozen=True)
class OomMessage:
    """The figures one OOM message gives; None where its era's wording does not say or could not be read."""

    text: str  # the message on one line
    era: str  # "thc", "driver", "1.0", "1.5", "1.x", "2.1+", "async" (the cudaMallocAsync backend)
    vendor: str = "CUDA"  # "HIP" on ROCm
    requested: int | None = None  # "Tried to allocate": the segment size the allocator asked the device for
    device: int | None = None
    total: int | None = None
    free: int | None = None
    allocated: int | None = None
    reserved: int | None = None
    allowed: int | None = None  # printed only where a per-process memory fraction is set
    private_pools: int | None = None
    this_process: int | None = None  # "Including non-PyTorch memory, this process has X in use": the job
    processes: tuple[ProcessUse, ...] = ()  # "Process N has X memory in use", in the message's order
    unread: tuple[str, ...] = ()  # figures the era prints that could not be read (keys of FIGURES)

    @property
    def other_processes(self) -> tuple[ProcessUse, ...]:
        """The listed processes that are not the job itself."""
        return tuple(p for p in self.processes if not p.own)


def parse_message(text: str, job_pid: int | None = None) -> OomMessage | None:
    """Figures of one message; None if the text is no out-of-memory message. `job_pid` names the job's own
    process where the user knows it, so it is never counted as another process."""
    lines = clean_lines(text)
    flat = re.sub(r"\s+", " ", " ".join(lines)).strip()
    c = compact(flat)
    era = _era(c)
    if era is None:
        return None
    vendor = "HIP" if re.search(r"\bhip\b|hipmalloc|hiperror", flat, re.I) else "CUDA"
    if era in ("thc", "driver"):
        return OomMessage(flat, era, vendor)
    figures = {"async": _async, "2.1+": _modern}.get(era, _legacy)(c)
    if era not in ("async", "2.1+"):
        era = "1.5" if figures.get("reserved_in_total") else ("1.0" if figures.get("cached") is not None else "1.x")
    figures = _derived(figures)
    figures["processes"] = _mark_own(figures.get("processes", ()), figures.get("this_process"),
                                     figures.get("reserved"), job_pid)
    unread = tuple(k for k in _EXPECTED[era] if figures.get(k) is None)
    keep = {k: v for k, v in figures.items() if k in OomMessage.__dataclass_fields__}
    return OomMessage(flat, era, vendor, unread=unread, **keep)


def _era(c: str) -> str | None:
    if re.search(r"cudaruntimeerror\(2\):outofmemory|thcudacheckfail.*outofmemory", c):
        return "thc"
    if re.search(r"allocationondevice\d+wouldexceedallowedmemory", c):
        return "async"
    if "triedtoallocate" not in c:
        if re.search(r"(?:cuda|hip)error:outofmemory|cuda_error_out_of_memory|hiperroroutofmemory", c):
            return "driver"
        return None
    return "2.1+" if re.search(r"hasatotalcapaci?ty", c) else "1.x"


def _size(pattern: str, c: str) -> int | None:
    m = re.search(pattern.replace("{S}", _SIZE), c)
    return _bytes(m.group(1), m.group(2)) if m else None


def _bytes(number: str, unit: str) -> int:
    return int(round(float(number) * _UNITS[unit]))


def _int(pattern: str, c: str) -> int | None:
    m = re.search(pattern, c)
    return int(m.group(1)) if m else None


def _modern(c: str) -> dict:
    processes = tuple(ProcessUse(int(pid), _bytes(n, u)) for pid, n, u in
                      re.findall(r"process(\d+)has" + _SIZE + r"memoryinuse", c))
    return {"requested": _size(r"triedtoallocate{S}", c), "device": _int(r"gpu(\d+)hasatotalcapac", c),
            "total": _size(r"totalcapaci?tyof{S}", c), "free": _size(r"ofwhich{S}isfree", c),
            "allowed": _size(r"{S}allowed;", c), "this_process": _size(r"thisprocesshas{S}memoryinuse", c),
            "processes": processes, "allocated": _size(r"oftheallocatedmemory{S}isallocated", c),
            "private_pools": _size(r"with{S}allocatedinprivatepools", c),
            "unallocated": _size(r"and{S}isreserved", c)}  # a message cut after "is reserved by" still says it


def _legacy(c: str) -> dict:
    reserved = _size(r"{S}reservedintotalbypytorch", c)
    return {"requested": _size(r"triedtoallocate{S}", c), "device": _int(r"\(gpu(\d+);", c),
            "total": _size(r"{S}totalcapacity", c), "allocated": _size(r"{S}alreadyallocated", c),
            "free": _size(r"{S}free", c), "allowed": _size(r"{S}allowed", c), "reserved": reserved,
            "reserved_in_total": reserved is not None, "cached": _size(r"{S}cached", c)}


def _async(c: str) -> dict:
    """cudaMallocAsync's message: its pool's cached memory is not printed, so no reserved figure."""
    return {"requested": _size(r"requested:{S}", c), "device": _int(r"allocationondevice(\d+)", c),
            "total": _size(r"devicelimit:{S}", c), "free": _size(r"free\(accordingtocuda\):{S}", c),
            "allocated": _size(r"currentlyallocated:{S}", c),
            "allowed": _size(r"pytorchlimit\(setbyuser-suppliedmemoryfraction\):{S}", c)}


def _derived(f: dict) -> dict:
    """Reserved from its parts: 2.1+ prints allocated and reserved-but-unallocated (whose sum it is); 1.0-1.4
    print allocated and cached (free blocks the allocator holds)."""
    parts = f.get("unallocated") if "unallocated" in f else f.get("cached")
    if f.get("reserved") is None and f.get("allocated") is not None and parts is not None:
        f["reserved"] = f["allocated"] + parts
    return f


def _mark_own(processes: tuple[ProcessUse, ...], this_process: int | None, reserved: int | None,
              job_pid: int | None) -> tuple[ProcessUse, ...]:
    """Which listed process is the job itself: the pid the user gave; else one whose size is the job's ("this
    process has X"); else, where PyTorch did not recognise its own process (a container), the only one that holds
    what PyTorch reserved plus at most JOB_OVERHEAD."""
    if job_pid is not None:
        own = {p.pid for p in processes if p.pid == job_pid}
    elif this_process is not None:
        own = {p.pid for p in processes if close(p.bytes, this_process)}
    else:
        fits = [p.pid for p in processes if reserved is not None
                and (reserved <= p.bytes or close(reserved, p.bytes)) and p.bytes <= reserved + JOB_OVERHEAD]
        own = set(fits) if len(fits) == 1 else set()
    return tuple(ProcessUse(p.pid, p.bytes, p.pid in own) for p in processes)
