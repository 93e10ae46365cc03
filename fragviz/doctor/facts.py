"""The figures of one OOM, from a snapshot's `oom` trace entry or a pasted message, what follows from them
(cached free memory, memory outside PyTorch, what other processes hold, whether a fraction caps anything), and
the margins the verdicts use."""
from __future__ import annotations

from dataclasses import dataclass

from fragviz.base.units import MiB
from fragviz.doctor.message import ProcessUse, close

# What the cached free memory plus the device's free memory must exceed a request by before fragmentation is
# the verdict. Below it, even a perfectly defragmented cache leaves too little room to count on: the CUDA
# context grows while a job runs (kernels loaded lazily on first use, library handles and their workspaces,
# a few MiB to tens of MiB each), the driver hands out memory in 2 MiB pages, and cudaMemGetInfo's free
# figure is more than one allocation is granted. 32 MiB is the tens of MiB these eat. Example: 358.40 MiB
# cached + 181.06 MiB free for a 512.00 MiB request leaves 27.46 MiB: exhaustion, not fragmentation.
DEFRAG_MARGIN = 32 * MiB
# Device free beyond the request (and a tenth of it) that makes a refusal more than page rounding: the device
# had the room, yet the allocation failed.
CAP_SLACK = 64 * MiB


@dataclass
class OomFacts:
    requested: int | None
    reserved: int | None = None
    allocated: int | None = None
    total: int | None = None
    free: int | None = None
    largest_free_block: int | None = None
    allowed: int | None = None
    processes: tuple[ProcessUse, ...] = ()
    era: str = "2.1+"
    device: int | None = None
    event: int | None = None
    pool_free: int | None = None  # cached free memory of the pool the request was for, where known
    this_process: int | None = None  # what NVML says the job's process holds, PyTorch's memory included
    unread: tuple[str, ...] = ()  # figures the message's era prints that could not be read
    # of the snapshot's state read, where one is: free bytes empty_cache() could not give back, and their share of
    # that state's reserved bytes (fragviz.model.metrics); a message alone says neither
    non_releasable: int | None = None
    fragmentation: float | None = None

    @property
    def cached_free(self) -> int | None:
        """Reserved but unallocated memory the request could use: its pool's, where known."""
        if self.pool_free is not None:
            return self.pool_free
        if self.reserved is None or self.allocated is None:
            return None
        return max(0, self.reserved - self.allocated)

    @property
    def outside(self) -> int | None:
        """Device memory used, but not reserved by PyTorch's allocator: the CUDA context, libraries, other
        processes."""
        if self.total is None or self.free is None or self.reserved is None:
            return None
        return max(0, self.total - self.free - self.reserved)

    @property
    def defrag_room(self) -> int | None:
        """Cached free + device free - requested: what a defragmented cache would leave after the request."""
        if self.requested is None or self.cached_free is None:
            return None
        return self.cached_free + (self.free or 0) - self.requested

    @property
    def others(self) -> tuple[ProcessUse, ...]:
        """The listed processes that are not the job itself."""
        return tuple(p for p in self.processes if not p.own)

    @property
    def job_bytes(self) -> int | None:
        """What the job's own process holds on the device (NVML's figure), where the message tells and the
        figure is plausible (not below what PyTorch reserves, as NVML's 0 in some containers is)."""
        own = [p.bytes for p in self.processes if p.own]
        held = self.this_process if self.this_process is not None else (own[0] if own else None)
        if held is None or (self.reserved is not None and held < self.reserved and not close(held, self.reserved)):
            return None
        return held

    @property
    def others_bytes(self) -> int | None:
        """What other processes hold: the device's used memory less the job's own where the job's figure is
        known; else the listed other processes; else everything outside PyTorch's allocator."""
        if self.total is not None and self.free is not None and self.job_bytes is not None:
            return max(0, self.total - self.free - self.job_bytes, sum(p.bytes for p in self.others))
        if self.others:
            return sum(p.bytes for p in self.others)
        return self.outside

    @property
    def cap(self) -> int | None:
        """The per-process memory fraction's limit, where it limits anything: PyTorch prints `allowed` only when
        a fraction is set, and a fraction of 1.0 (a limit equal to the device) caps nothing."""
        if self.allowed is None or (self.total is not None and (self.allowed >= self.total
                                                                or close(self.allowed, self.total))):
            return None
        return self.allowed

    @property
    def fraction_is_whole(self) -> bool:
        """`allowed` equals the device (a fraction of 1.0, or the cudaMallocAsync backend's unlimited figure)."""
        return self.allowed is not None and self.total is not None and self.cap is None

    @property
    def slack(self) -> int:
        return max(CAP_SLACK, (self.requested or 0) // 10)
