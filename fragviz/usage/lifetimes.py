"""Every allocation of a device's trace as one record: when it became live, when it stopped, and what it was.

States are numbered as in the replay: state K is the allocator's state after the first K events. An
allocation made by the `alloc` at event i is live in states i + 1 .. j, where j is the event of its
`free_completed` (a block waiting on other streams, `active_pending_free`, still holds its memory, as
PyTorch's allocated_bytes counts it). So each record's life is the half-open range of states [start, end):
start is 0 for a block live before the trace began, and end is n + 1 (past the last state) for a block
still live at the end. Sizes are block sizes, the bytes the allocator gave: the live records of a state sum
to the replay's allocated bytes there. Requested (unrounded) sizes are kept beside them.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fragviz.model import ALLOC, FREE_COMPLETED, NO_TIME, Trace

COLUMNS = ("start", "end", "size", "requested", "stack", "address", "stream", "start_us", "end_us")
_DTYPES = {"start": np.int64, "end": np.int64, "size": np.int64, "requested": np.int64, "stack": np.int32,
           "address": np.int64, "stream": np.int64, "start_us": np.int64, "end_us": np.int64}



@dataclass(frozen=True)
class Lifetimes:
    """Columns of equal length, one row per allocation, ordered by start."""

    start: np.ndarray
    end: np.ndarray
    size: np.ndarray
    requested: np.ndarray
    stack: np.ndarray
    address: np.ndarray
    stream: np.ndarray
    start_us: np.ndarray  # time_us of the alloc event, NO_TIME when unknown
    end_us: np.ndarray  # time_us of the free_completed event, NO_TIME when unknown
    states: int  # the number of states: trace length + 1

    def __len__(self) -> int:
        return len(self.start)

    def columns(self) -> dict[str, np.ndarray]:
        return {name: getattr(self, name) for name in COLUMNS}

    @classmethod
    def from_columns(cls, cols: dict[str, np.ndarray], states: int) -> Lifetimes:
        return cls(**{name: np.asarray(cols[name], _DTYPES[name]) for name in COLUMNS}, states=states)

    def live_bytes(self, lo: int, hi: int) -> np.ndarray:
        """Live bytes in every state lo..hi (inclusive), summed from the records."""
        span = hi - lo + 1
        first = np.clip(self.start - lo, 0, span)
        last = np.clip(self.end - lo, 0, span)
        # bincount sums in float64: exact for integer sums below 2**53 bytes (8 PiB)
        diff = (np.bincount(first, weights=self.size, minlength=span + 1)
                - np.bincount(last, weights=self.size, minlength=span + 1))
        return np.rint(np.cumsum(diff)[:-1]).astype(np.int64)


def lifetimes_of(trace: Trace, block_size: np.ndarray, start_blocks: dict[str, np.ndarray]) -> Lifetimes:
    """The allocations of a replayed trace.

    `block_size` is the replay's block size per event (the size each `alloc` got); `start_blocks` the
    checkpoint columns of the state before the first event (`blk_addr`, `blk_size`, ...), whose blocks
    are the allocations made before the trace window.
    """
    n = len(trace)
    action = trace.action
    allocs = np.nonzero(action == ALLOC)[0]
    frees = np.nonzero(action == FREE_COMPLETED)[0]
    pre = len(start_blocks["blk_addr"])
    # Every beginning (a block of the start state at position -1, or an alloc) and every end (a free_completed),
    # sorted by address and then by position: a beginning's end is the next entry at its address.
    position = np.concatenate([np.full(pre, -1, np.int64), allocs, frees])
    address = np.concatenate([start_blocks["blk_addr"].astype(np.int64), trace.addr[allocs], trace.addr[frees]])
    order = np.lexsort((position, address))
    s_pos, s_addr = position[order], address[order]
    following = np.append(s_pos[1:], n)
    same_address = np.append(s_addr[1:] == s_addr[:-1], False)
    # The next entry at the same address ends it: a free_completed, or (a trace that lost the free) a new alloc
    end_sorted = np.where(same_address, following + 1, n + 1)
    ends = np.empty(len(position), np.int64)
    ends[order] = end_sorted
    ends = ends[:pre + len(allocs)]
    cols = {
        "start": np.concatenate([np.zeros(pre, np.int64), allocs + 1]),
        "end": ends,
        "size": np.concatenate([start_blocks["blk_size"], block_size[allocs]]),
        "requested": np.concatenate([start_blocks["blk_requested"], trace.size[allocs]]),
        "stack": np.concatenate([start_blocks["blk_stack"], trace.stack[allocs]]),
        "address": address[:pre + len(allocs)],
        "stream": np.concatenate([start_blocks["blk_stream"], trace.stream[allocs]]),
        **_times(trace, allocs, ends, pre),
    }
    return Lifetimes.from_columns(cols, n + 1)


def _times(trace: Trace, allocs: np.ndarray, ends: np.ndarray, pre: int) -> dict[str, np.ndarray]:
    """time_us of each record's alloc and free_completed events, where the trace has times."""
    n = len(trace)
    none = np.full(len(ends), NO_TIME, np.int64)
    if not trace.has_time:
        return {"start_us": none, "end_us": none.copy()}
    times = trace.time_us
    start_us = np.concatenate([np.full(pre, NO_TIME, np.int64), times[allocs]])
    freed = ends <= n  # end = free event + 1
    end_us = none.copy()
    end_us[freed] = times[ends[freed] - 1]
    return {"start_us": start_us, "end_us": end_us}
