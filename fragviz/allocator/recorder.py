"""Capture: record a workload's memory history as a snapshot.

On a CUDA machine this is PyTorch's own recording (`torch.cuda.memory._record_memory_history`), dumped at
the end and also at an OOM (from the allocator's OOM observer). On a machine without CUDA the workload
runs on the CPU; every tensor storage it creates and frees is recorded with its real Python stack, and
served by fragviz's allocator model as if on a CUDA device of the given size, so it can run out of memory
as it would there. Such a snapshot is marked as simulated inside the file.

torch is imported lazily: the rest of fragviz runs without it.
"""
from __future__ import annotations

import gzip
import os
import pickle
import sys
import threading
import time
import weakref
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from fragviz.allocator.config import parse_alloc_conf
from fragviz.allocator.rules import allocation_size, round_size
from fragviz.allocator.packed import PackedAllocator
from fragviz.allocator.sim import Peaks
from fragviz.allocator.state import allocator_segments, build_snapshot, copy_state
from fragviz.base.files import write_output
from fragviz.model import Frame
from fragviz.snapshot.frames import StackInterner
from fragviz.base.units import torch_format_size

DEFAULT_DEVICE_MEMORY = 16 * 1024**3
# which tensors a simulated device serves: every CPU tensor storage (code that never names CUDA), or, once the code
# places a tensor on CUDA, only the tensors on the simulated CUDA device (fragviz.allocator.cudasim)
EVERY_TENSOR, CUDA_TENSORS = "every tensor", "cuda tensors"
_SKIP_FILES = (os.path.dirname(os.path.dirname(os.path.abspath(__file__))),  # fragviz's own frames
               "torch/utils/_python_dispatch.py", "contextlib.py",
               "<frozen runpy>", "runpy.py")


def write_snapshot(path: str, data: dict[str, Any]) -> None:
    """Pickle with protocol 4 (what PyTorch's own viewer reads), gzip-compressed if the name ends in .gz."""
    blob = pickle.dumps(data, protocol=4)
    if path.endswith(".gz"):
        blob = gzip.compress(blob, mtime=0)
    write_output(path, blob)


@contextmanager
def capture(path: str, device_memory: int | None = None, alloc_conf: str | None = None,
            max_entries: int = 1_000_000, simulate: bool | None = None, root_file: str | None = None) -> Iterator[Any]:
    """Record the memory history of the code in the block into the snapshot file at `path`."""
    import torch

    use_cuda = torch.cuda.is_available() if simulate is None else not simulate
    if use_cuda:
        with _cuda_capture(path, max_entries) as handle:
            yield handle
    else:
        with _simulated_capture(path, device_memory or DEFAULT_DEVICE_MEMORY, alloc_conf, root_file) as handle:
            yield handle


@contextmanager
def _cuda_capture(path: str, max_entries: int) -> Iterator[None]:
    import torch

    dumped = []

    def on_oom(device: int, alloc: int, device_total: int, device_free: int) -> None:
        write_snapshot(path, torch.cuda.memory._snapshot())
        dumped.append(True)

    torch.cuda.memory._record_memory_history(max_entries=max_entries)
    torch._C._cuda_attach_out_of_memory_observer(on_oom)
    try:
        yield None
    finally:
        if not dumped:
            write_snapshot(path, torch.cuda.memory._snapshot())
        torch.cuda.memory._record_memory_history(enabled=None)


class SimulatedDevice:
    """Serves CPU tensor storages from a simulated CUDA caching allocator, with their Python stacks.

    Thread-safe: the live agent reads the allocator from its own threads while the job allocates, and
    storages can be finalised on any thread. With `record=False` nothing is traced and no stack is taken
    (what keeps mirroring cheap when no history is wanted); `max_entries` bounds the trace as PyTorch's
    ring buffer does. `on_oom(message)` is called, under the lock, before the OOM error is raised.
    """

    def __init__(self, device_memory: int, alloc_conf: str | None, root_file: str | None = None,
                 record: bool = True, max_entries: int | None = None,
                 on_oom: Callable[[str], None] | None = None) -> None:
        conf = alloc_conf if alloc_conf is not None else os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
        self.conf = conf
        self.alloc = PackedAllocator(parse_alloc_conf(conf), device_memory, record=record)
        self.alloc.clock = lambda: int(time.time() * 1e6)
        self.stacks = StackInterner()
        self._live: dict[int, Any] = {}
        self.oom_message: str | None = None
        self.closed = False  # once the snapshot is being taken, later frees (finalizers, GC) are not recorded
        self.root_file = root_file  # the script being run: frames outside it (the launcher) are left out
        self.lock = threading.RLock()
        self.max_entries = max_entries
        self.on_oom = on_oom
        self.lock_seconds = 0.0  # how long the last snapshot held the lock
        self.placement = EVERY_TENSOR

    def place_on_cuda(self) -> None:
        """The code placed a tensor on CUDA: from now on only tensors on the simulated CUDA device count. What was
        counted so far (host tensors) is forgotten: the device is emptied and its trace and peaks start again."""
        if self.placement == CUDA_TENSORS:
            return
        with self.lock:
            self.placement = CUDA_TENSORS
            for block in self._live.values():
                self.alloc.free(block)
            self._live.clear()
            self.alloc.empty_cache()
            del self.alloc.trace[:]
            a = self.alloc
            a.peaks = Peaks(a.reserved, a.active_bytes, a.requested)
            a.num_alloc_retries = a.num_ooms = a.num_device_alloc = a.num_device_free = 0

    def holds(self, storage: Any) -> bool:
        """Whether a storage is on the simulated CUDA device (never, until the code places one there)."""
        return self.holds_key(storage._cdata)

    def holds_key(self, key: int | None) -> bool:
        return self.placement == CUDA_TENSORS and key in self._live

    def track(self, storage: Any, stream: int = 0) -> None:
        key = storage._cdata
        nbytes = storage.nbytes()
        if key in self._live or nbytes == 0 or self.closed:
            return
        with self.lock:
            stack = self._stack() if self.alloc.record else -1
            block = self.alloc.malloc(nbytes, stream, stack)
            if block is None:
                self.oom_message = self._oom_message(nbytes)
                if self.on_oom is not None:
                    self.on_oom(self.oom_message)
                raise _oom_error(self.oom_message)
            self._live[key] = block
            self._trim()
        weakref.finalize(storage, self._release, key)

    def _release(self, key: int) -> None:
        with self.lock:
            if self.closed:
                return
            block = self._live.pop(key, None)
            if block is not None:
                self.alloc.free(block)
                self._trim()

    def _trim(self) -> None:
        """Keep at most max_entries trace entries (trimmed in halves, so the cost per event stays constant)."""
        trace = self.alloc.trace
        if self.max_entries is not None and len(trace) > 2 * self.max_entries:
            del trace[:len(trace) - self.max_entries]

    def _stack(self) -> int:
        # the caller's frames, innermost first as PyTorch writes them, from the frame that called track (past
        # _stack, track and the dispatch mode); read off the frames, not traceback's summaries, which read each
        # frame's source line from disk
        stack = [(f.f_code.co_filename, f.f_lineno or 0, f.f_code.co_name) for f in _frames(sys._getframe(3))]
        if self.root_file is not None:
            inner = next((i for i in range(len(stack) - 1, -1, -1) if stack[i][0] == self.root_file), None)
            if inner is not None:  # the outermost frame of the script, and what it called
                stack = stack[:inner + 1]
        return self.stacks.intern_keys(fs for fs in stack if not any(s in fs[0] for s in _SKIP_FILES))

    def _oom_message(self, nbytes: int) -> str:
        """PyTorch's own message (c10's modern format), with the simulated device's figures and a last word saying
        so."""
        a, size = self.alloc, torch_format_size
        alloc_size = allocation_size(round_size(nbytes, a.settings))
        return (f"CUDA out of memory. Tried to allocate {size(alloc_size)}. GPU 0 has a total capacity of "
                f"{size(a.capacity)} of which {size(a.device_free())} is free. Including non-PyTorch memory, this "
                f"process has {size(a.reserved)} memory in use. Of the allocated memory {size(a.active_bytes)} is "
                f"allocated by PyTorch, and {size(a.reserved - a.active_bytes)} is reserved by PyTorch but "
                f"unallocated. If reserved but unallocated memory is large try setting {_conf_variable()}="
                "expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  "
                "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables) (simulated by fragviz on a "
                "CPU)")

    def snapshot(self, provenance: dict[str, Any], close: bool = True, trace: bool = True,
                 pause: Callable[[], None] | None = None) -> dict[str, Any]:
        """The device as a PyTorch snapshot; `close` stops recording (the end of a capture). The lock that the
        job's allocations wait on is held only to copy the state (`copy_state`, O(segments + blocks); without
        the trace, the trace is not touched); the snapshot is built from the copy outside it, calling `pause`
        now and then (`build_snapshot`). `lock_seconds` is how long the last one held it."""
        started = time.perf_counter()
        with self.lock:
            self.closed = self.closed or close
            state = copy_state([self.alloc], trace)
            frames, stacks = tuple(self.stacks.frames), tuple(self.stacks.stacks)
            self.lock_seconds = time.perf_counter() - started
        return build_snapshot(state, frames, stacks, provenance, pause)

    def packed_state(self, trace: bool = True, since: int = 0) -> "PackedState":
        """What a snapshot needs, copied under the lock in O(segments + blocks) plus one memory copy of the
        trace entries added after the first `since` ever added (all with `since=0`): the live agent hands it to
        its server process, which keeps the rest from earlier copies and builds the snapshot there."""
        with self.lock:
            started = time.perf_counter()  # held from here: waiting for it (and for the GIL) costs the job nothing
            segments = allocator_segments(self.alloc)
            packed = self.alloc.trace.copy(since)[0] if trace else None
            length, appended = len(self.alloc.trace), self.alloc.trace.appended
            self.lock_seconds = time.perf_counter() - started
        return PackedState(self.alloc.device, segments, packed, length, appended, self.alloc.settings.as_dict())

    def frames_since(self, frames: int, stacks: int) -> tuple[list[Frame], list[tuple[int, ...]]]:
        """The frames and stacks interned after the first `frames` and `stacks` (the interner only appends)."""
        with self.lock:
            return self.stacks.frames[frames:], self.stacks.stacks[stacks:]


@dataclass(frozen=True)
class PackedState:
    """A simulated device's state as copied for a snapshot: its segments (blocks with stack ids), the newest of
    its `length` trace entries packed (fragviz.allocator.packed; None without: close it once sent), how many
    entries were ever added when it was copied, and its settings."""
    device: int
    segments: list[dict[str, Any]]
    trace: Any
    length: int
    appended: int
    settings: dict[str, Any]


def _conf_variable() -> str:
    """The variable PyTorch's OOM hint names: PYTORCH_ALLOC_CONF from 2.10, PYTORCH_CUDA_ALLOC_CONF before."""
    version = getattr(sys.modules.get("torch"), "__version__", "0.0")
    try:
        major, minor = (int(part) for part in str(version).split(".")[:2])
    except ValueError:
        return "PYTORCH_CUDA_ALLOC_CONF"
    return "PYTORCH_ALLOC_CONF" if (major, minor) >= (2, 10) else "PYTORCH_CUDA_ALLOC_CONF"


def _frames(frame: Any) -> Iterator[Any]:
    while frame is not None:
        yield frame
        frame = frame.f_back


def _oom_error(message: str) -> Exception:
    import torch

    return torch.OutOfMemoryError(message)


def simulated_provenance(device: SimulatedDevice, generator: str) -> dict[str, Any]:
    import torch

    note = ("the tensors the code placed on CUDA, run on a CPU" if device.placement == CUDA_TENSORS else
            "every tensor storage of a CPU run (the code placed none on CUDA)")
    return {"origin": "simulated", "generator": generator, "device_memory_bytes": device.alloc.capacity,
            "alloc_conf": device.conf, "torch": str(torch.__version__), "placement": device.placement,
            "note": f"{note}, served by fragviz's allocator model as on a CUDA device"}


@contextmanager
def _simulated_capture(path: str, device_memory: int, alloc_conf: str | None,
                       root_file: str | None) -> Iterator[SimulatedDevice]:
    from fragviz.allocator.cudasim import cuda_on_cpu

    device = SimulatedDevice(device_memory, alloc_conf, root_file)
    try:
        with cuda_on_cpu(device):
            yield device
    finally:
        provenance = simulated_provenance(device, "fragviz.capture")
        if device.oom_message:
            provenance["oom_message"] = device.oom_message
        write_snapshot(path, device.snapshot(provenance))
