"""The caching allocator's data structures (reference C.3, C.12): blocks in per-segment chains, pools of
free blocks ordered by (stream, size, address), and expandable segments' virtual address reservations."""
from __future__ import annotations

from bisect import bisect_left, insort

from fragviz.model.metrics import stuck_in_gap

U64 = (1 << 64) - 1


def stream_key(stream: int) -> int:
    """Streams compare as unsigned pointers (PyTorch casts cudaStream_t to int64 in snapshots)."""
    return stream & U64


class Block:
    """A block of a segment: allocated, pending free (freed, waiting on stream events), free, or unmapped."""

    __slots__ = ("addr", "size", "stream", "requested", "allocated", "pending", "prev", "next", "pool",
                 "mapped", "es", "gc_base", "stack", "key", "stuck")

    def __init__(self, addr: int, size: int, stream: int, pool: "BlockPool", mapped: bool = True,
                 es: "ExpandableSegment | None" = None) -> None:
        self.addr, self.size, self.stream, self.pool = addr, size, stream, pool
        self.requested = 0
        self.allocated = False
        self.pending = False
        self.prev: Block | None = None
        self.next: Block | None = None
        self.mapped = mapped
        self.es = es
        self.gc_base = 0
        self.stack = -1
        self.key: tuple[int, int, int] | None = None  # its key in the pool's free set while it is free
        self.stuck = 0  # while free: its bytes that releasing the cache could not give back

    def non_releasable(self) -> int:
        """Bytes of this free block that `release_cached_blocks` could not give back: all of it in a segment that
        holds other (active) blocks, none of a whole free segment; in an expandable segment, the partial pages
        at its ends (whole pages inside it are unmapped)."""
        if self.es is not None:
            return stuck_in_gap(self.addr, self.addr + self.size, self.es.base, self.es.page)
        return self.size if self.is_split else 0

    @property
    def is_split(self) -> bool:
        return self.prev is not None or self.next is not None

    def splice(self, prev: "Block | None", nxt: "Block | None") -> None:
        """Link this block between prev and nxt."""
        self.prev, self.next = prev, nxt
        if prev is not None:
            prev.next = self
        if nxt is not None:
            nxt.prev = self


class BlockPool:
    """Free blocks of one pool kind (small or large) of one pool (the default, or a private pool)."""

    def __init__(self, small: bool, pool_id: tuple[int, int] | None = None) -> None:
        self.small = small
        self.pool_id = pool_id  # None: the default pools
        self.keys: list[tuple[int, int, int]] = []  # sorted (stream, size, address) of free mapped blocks
        self.by_key: dict[tuple[int, int, int], Block] = {}
        self.by_addr: dict[int, Block] = {}  # the same free blocks by address
        self.unmapped_keys: list[tuple[int, int]] = []  # sorted (stream, address) of unmapped blocks
        self.unmapped: dict[tuple[int, int], Block] = {}
        self.get_free_blocks_call_count = 0
        # Free bytes the pool's blocks hold that releasing could not give back. A free block's neighbours change
        # only while it is out of the free set (merges and splits take it out first), so the figure taken when
        # it goes in holds until it comes out.
        self.non_releasable = 0

    def insert(self, block: Block) -> None:
        key = (stream_key(block.stream), block.size, block.addr)
        block.key = key
        insort(self.keys, key)
        self.by_key[key] = block
        self.by_addr[block.addr] = block
        block.stuck = block.non_releasable()
        self.non_releasable += block.stuck

    def remove(self, block: Block) -> None:
        key = block.key
        self.non_releasable -= block.stuck
        del self.keys[bisect_left(self.keys, key)]
        del self.by_key[key]
        del self.by_addr[key[2]]
        block.key = None

    def insert_unmapped(self, block: Block) -> None:
        key = (stream_key(block.stream), block.addr)
        block.key = key  # type: ignore[assignment]
        insort(self.unmapped_keys, key)
        self.unmapped[key] = block

    def remove_unmapped(self, block: Block) -> None:
        key = block.key
        del self.unmapped_keys[bisect_left(self.unmapped_keys, key)]
        del self.unmapped[key]  # type: ignore[index]
        block.key = None

    def lower_bound(self, stream: int, size: int) -> int:
        return bisect_left(self.keys, (stream_key(stream), size, -1))

    def largest_free(self) -> int:
        """The largest free block's size, in time proportional to the streams: free blocks are ordered by
        (stream, size, address), so each stream's largest is its last key."""
        keys, end, best = self.keys, len(self.keys), 0
        while end:
            stream, size, _ = keys[end - 1]
            best = max(best, size)
            end = bisect_left(keys, (stream,), 0, end)
        return best

    def free_blocks(self) -> list[Block]:
        return [self.by_key[k] for k in self.keys]


class ExpandableSegment:
    """A virtual address reservation mapped page by page (2 MiB pages in the small pool, 20 MiB in the large)."""

    def __init__(self, base: int, page: int, pages: int, stream: int) -> None:
        self.base, self.page, self.pages, self.stream = base, page, pages, stream
        self.mapped: set[int] = set()

    @property
    def size(self) -> int:
        return self.page * self.pages

    def pages_to_map(self, ptr: int, size: int) -> tuple[int, int]:
        """Page range [begin, end) that mapping [ptr, ptr + size) needs: rounded out to whole pages."""
        begin = (ptr - self.base) // self.page
        end = -(-(ptr + size - self.base) // self.page)
        return begin, end

    def pages_to_unmap(self, ptr: int, size: int) -> tuple[int, int]:
        """Page range wholly inside [ptr, ptr + size): rounded in to whole pages."""
        begin = -(-(ptr - self.base) // self.page)
        end = (ptr + size - self.base) // self.page
        return begin, max(begin, end)

    def range_of(self, begin: int, end: int) -> tuple[int, int]:
        return self.base + begin * self.page, (end - begin) * self.page
