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
import time
import traceback
import weakref
from contextlib import contextmanager
from typing import Any, Iterator

from fragviz.allocator.config import parse_alloc_conf
from fragviz.allocator.rules import allocation_size, round_size
from fragviz.allocator.sim import DeviceAllocator
from fragviz.allocator.state import snapshot_dict
from fragviz.snapshot.frames import StackInterner
from fragviz.units import torch_format_size

DEFAULT_DEVICE_MEMORY = 16 * 1024**3
_SKIP_FILES = (os.path.dirname(os.path.abspath(__file__)), "torch/utils/_python_dispatch.py", "contextlib.py",
               "<frozen runpy>", "runpy.py")


def write_snapshot(path: str, data: dict[str, Any]) -> None:
    """Pickle with protocol 4 (what PyTorch's own viewer reads), gzip-compressed if the name ends in .gz."""
    blob = pickle.dumps(data, protocol=4)
    if path.endswith(".gz"):
        blob = gzip.compress(blob, mtime=0)
    tmp = path + ".tmp"
    with open(tmp, "wb") as fh:
        fh.write(blob)
    os.replace(tmp, path)


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
        torch.cuda.memory._dump_snapshot(path)
        dumped.append(True)

    torch.cuda.memory._record_memory_history(max_entries=max_entries)
    torch._C._cuda_attach_out_of_memory_observer(on_oom)
    try:
        yield None
    finally:
        if not dumped:
            torch.cuda.memory._dump_snapshot(path)
        torch.cuda.memory._record_memory_history(enabled=None)


class SimulatedDevice:
    """Serves CPU tensor storages from a simulated CUDA caching allocator, with their Python stacks."""

    def __init__(self, device_memory: int, alloc_conf: str | None, root_file: str | None = None) -> None:
        conf = alloc_conf if alloc_conf is not None else os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
        self.conf = conf
        self.alloc = DeviceAllocator(parse_alloc_conf(conf), device_memory)
        self.alloc.clock = lambda: int(time.time() * 1e6)
        self.stacks = StackInterner()
        self._live: dict[int, Any] = {}
        self.oom_message: str | None = None
        self.closed = False  # once the snapshot is being taken, later frees (finalizers, GC) are not recorded
        self.root_file = root_file  # the script being run: frames outside it (the launcher) are left out

    def track(self, storage: Any) -> None:
        key = storage._cdata
        nbytes = storage.nbytes()
        if key in self._live or nbytes == 0:
            return
        block = self.alloc.malloc(nbytes, 0, self._stack())
        if block is None:
            self.oom_message = self._oom_message(nbytes)
            raise _oom_error(self.oom_message)
        self._live[key] = block
        weakref.finalize(storage, self._release, key)

    def _release(self, key: int) -> None:
        if self.closed:
            return
        block = self._live.pop(key, None)
        if block is not None:
            self.alloc.free(block)

    def _stack(self) -> int:
        stack = traceback.extract_stack()[:-3]
        if self.root_file is not None:
            outer = next((i for i, fs in enumerate(stack) if fs.filename == self.root_file), 0)
            stack = stack[outer:]
        # innermost first, as PyTorch writes them
        return self.stacks.intern_keys((fs.filename, fs.lineno or 0, fs.name) for fs in reversed(stack)
                                       if not any(s in fs.filename for s in _SKIP_FILES))

    def _oom_message(self, nbytes: int) -> str:
        a = self.alloc
        alloc_size = allocation_size(round_size(nbytes, a.settings))
        return (f"CUDA out of memory. Tried to allocate {torch_format_size(alloc_size)}. GPU 0 has a total capacity "
                f"of {torch_format_size(a.capacity)} of which {torch_format_size(a.device_free())} is free. Of the "
                f"allocated memory {torch_format_size(a.active_bytes)} is allocated by PyTorch, and "
                f"{torch_format_size(a.reserved - a.active_bytes)} is reserved by PyTorch but unallocated. If reserved "
                "but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to "
                "avoid fragmentation. (simulated by fragviz on a CPU)")

    def snapshot(self, provenance: dict[str, Any]) -> dict[str, Any]:
        self.closed = True
        return snapshot_dict([self.alloc], tuple(self.stacks.frames), tuple(self.stacks.stacks), provenance)


def _oom_error(message: str) -> Exception:
    import torch

    return torch.OutOfMemoryError(message)


@contextmanager
def _simulated_capture(path: str, device_memory: int, alloc_conf: str | None,
                       root_file: str | None) -> Iterator[SimulatedDevice]:
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    device = SimulatedDevice(device_memory, alloc_conf, root_file)

    class _Tracker(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in tree_leaves(out):
                if isinstance(t, torch.Tensor) and t.device.type == "cpu":
                    device.track(t.untyped_storage())
            return out

    provenance = {"origin": "simulated", "generator": "fragviz.capture", "device_memory_bytes": device_memory,
                  "alloc_conf": device.conf, "torch": str(torch.__version__),
                  "note": "tensor storages of a CPU run, placed by fragviz's allocator model as on a CUDA device"}
    try:
        with _Tracker():
            yield device
    finally:
        if device.oom_message:
            provenance["oom_message"] = device.oom_message
        write_snapshot(path, device.snapshot(provenance))
