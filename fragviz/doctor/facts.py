"""The figures of one OOM, from a snapshot's `oom` trace entry or a pasted message, and the margin a
defragmented cache must leave for a fragmentation verdict."""
from __future__ import annotations

from dataclasses import dataclass, field

MiB = 1024 * 1024
# What the cached free memory plus the device's free memory must exceed a request by before fragmentation is
# the verdict. Below it, even a perfectly defragmented cache leaves too little room to count on: the CUDA
# context grows while a job runs (kernels loaded lazily on first use, library handles and their workspaces,
# a few MiB to tens of MiB each), the driver hands out memory in 2 MiB pages, and cudaMemGetInfo's free
# figure is more than one allocation is granted. 32 MiB is the tens of MiB these eat. Example: 358.40 MiB
# cached + 181.06 MiB free for a 512.00 MiB request leaves 27.46 MiB: exhaustion, not fragmentation.
DEFRAG_MARGIN = 32 * MiB


@dataclass
class OomFacts:
    requested: int | None
    reserved: int | None = None
    allocated: int | None = None
    total: int | None = None
    free: int | None = None
    largest_free_block: int | None = None
    allowed: int | None = None
    other_processes: list[int] = field(default_factory=list)
    era: str = "2.1+"
    device: int | None = None
    event: int | None = None
    pool_free: int | None = None  # cached free memory of the pool the request was for, where known

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
        if self.total is None or self.free is None or self.reserved is None:
            return None
        return max(0, self.total - self.free - self.reserved)

    @property
    def defrag_room(self) -> int | None:
        """Cached free + device free - requested: what a defragmented cache would leave after the request."""
        if self.requested is None or self.cached_free is None:
            return None
        return self.cached_free + (self.free or 0) - self.requested
