"""fragviz: see and explain CUDA caching-allocator fragmentation in PyTorch memory snapshots."""
from __future__ import annotations

__version__ = "0.1.0"


def capture(path: str, device_memory: int | None = None, alloc_conf: str | None = None, **options):
    """Record the memory history of a `with` block into the snapshot file at `path`.

        with fragviz.capture("run.pickle"):
            train()

    On CUDA, PyTorch records it (and the file is also written at an OOM); without CUDA the block runs on the
    CPU and fragviz's allocator model serves its tensors as on a CUDA device of `device_memory` bytes.
    """
    from fragviz.allocator.recorder import capture as _capture

    return _capture(path, device_memory, alloc_conf, **options)
