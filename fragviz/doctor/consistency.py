"""What the doctor says about the figures themselves: those the message's era prints that could not be read,
and those that cannot all be true of one device at one moment."""
from __future__ import annotations

from fragviz.doctor.cause import UNDETERMINED
from fragviz.doctor.facts import OomFacts
from fragviz.doctor.message import FIGURES, close
from fragviz.base.units import format_bytes as fb


def figure_warnings(f: OomFacts, verdict: str) -> list[str]:
    """Unread figures, then inconsistent ones."""
    return _unread(f, verdict) + _inconsistent(f)


def figure_notes(f: OomFacts) -> list[str]:
    out = []
    if f.fraction_is_whole and close(f.allowed, f.total):
        out.append(f"The message's {fb(f.allowed)} allowed is the whole device ({fb(f.total)}): the memory fraction "
                   "is 1.0, so it caps nothing and raising it cannot help.")
    elif f.fraction_is_whole:
        out.append(f"The message's limit ({fb(f.allowed)}) is more than the device ({fb(f.total)}): no memory "
                   "fraction limits PyTorch.")
    if f.era == "async":
        out.append("The cudaMallocAsync backend's message does not say how much memory its pool caches, so the "
                   "cached free memory is not known.")
    return out


def _unread(f: OomFacts, verdict: str) -> list[str]:
    if not f.unread:
        return []
    names = ", ".join(FIGURES[k] for k in f.unread)
    then = ("so the figures read do not tell the cause" if verdict == UNDETERMINED
            else "the verdict rests on the figures that were read")
    return [f"Could not read {names} from the message (cut off, or not a form fragviz knows): {then}. Paste the "
            "whole message as PyTorch printed it."]


def _inconsistent(f: OomFacts) -> list[str]:
    total, out = f.total, []
    for name, value in (("reserved by PyTorch", f.reserved), ("allocated by PyTorch", f.allocated),
                        ("free", f.free)):
        if total is not None and value is not None and value > total and not close(value, total):
            out.append(f"the message's {fb(value)} {name} is more than the device's {fb(total)} total")
    if f.reserved is not None and f.allocated is not None and f.allocated > f.reserved and not close(
            f.allocated, f.reserved):
        out.append(f"the {fb(f.allocated)} allocated is more than the {fb(f.reserved)} reserved")
    if f.this_process is not None and f.reserved is not None and f.job_bytes is None:
        out.append(f"NVML says this process holds {fb(f.this_process)}, less than the {fb(f.reserved)} PyTorch "
                   "reserves (NVML cannot see this process's memory here, as in some containers)")
    if not out:
        return []
    said = "; ".join(out)
    return [said[0].upper() + said[1:] + ": these figures cannot all be true of one device at one moment (under Windows WDDM "
            "the driver pages device memory out to system memory; a message edited by hand mixes moments), so "
            "the verdict is less certain than its figures suggest."]
