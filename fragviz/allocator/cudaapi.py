"""`torch.cuda` answered by a simulated device, for CUDA code run on a CPU (fragviz.allocator.cudasim).

The device's questions (`is_available`, `device_count`, properties), its memory figures (`memory_allocated`,
`max_memory_allocated`, `memory_reserved`, `memory_stats`, `reset_peak_memory_stats`, `mem_get_info`,
`empty_cache`, `memory_snapshot`, `_snapshot`), streams and events (kept in order: nothing runs concurrently, so
`synchronize`, `query` and `wait_stream` have nothing to wait for) and `torch.autocast("cuda")` (the CPU's autocast,
in float16 unless told otherwise) are answered from the simulated allocator, so code that prints or asserts its own
memory sees the figures fragviz records. The functions are replaced process-wide while the block runs, and put back.
"""
from __future__ import annotations

import itertools
import time
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator

from fragviz.allocator.recorder import SimulatedDevice, write_snapshot

DEVICE_NAME = "fragviz simulated CUDA device"
CAPABILITY = (8, 0)  # what the simulated device claims: bfloat16 and TF32, as on an A100
_MISSING = object()


@dataclass(frozen=True)
class DeviceProperties:
    """What `torch.cuda.get_device_properties` answers for the simulated device."""

    name: str
    total_memory: int
    major: int = CAPABILITY[0]
    minor: int = CAPABILITY[1]
    multi_processor_count: int = 1
    is_integrated: bool = False
    is_multi_gpu_board: bool = False


def memory_stats(device: SimulatedDevice) -> "OrderedDict[str, int]":
    """The simulated allocator's figures under `torch.cuda.memory_stats()`'s names (the "all" pool)."""
    with device.lock:
        a = device.alloc
        allocated = a.active_bytes - a.pending_bytes()
        stats = {"allocated_bytes.all.current": allocated, "allocated_bytes.all.peak": a.peaks.active,
                 "active_bytes.all.current": a.active_bytes, "active_bytes.all.peak": a.peaks.active,
                 "reserved_bytes.all.current": a.reserved, "reserved_bytes.all.peak": a.peaks.reserved,
                 "requested_bytes.all.current": a.requested, "requested_bytes.all.peak": a.peaks.requested,
                 "inactive_split_bytes.all.current": a.inactive_split_bytes(),
                 "num_alloc_retries": a.num_alloc_retries, "num_ooms": a.num_ooms,
                 "num_device_alloc": a.num_device_alloc, "num_device_free": a.num_device_free}
    return OrderedDict(sorted(stats.items()))


def reset_peaks(device: SimulatedDevice) -> None:
    with device.lock:
        a = device.alloc
        a.peaks.reserved, a.peaks.active, a.peaks.requested = a.reserved, a.active_bytes, a.requested


def empty_cache(device: SimulatedDevice) -> None:
    with device.lock:
        device.alloc.empty_cache()


class Streams:
    """The simulated device's streams: each has an id, the allocator keeps its blocks apart as PyTorch does, and
    `torch.cuda.stream(s)` makes the recording thread's allocations on it."""

    def __init__(self, placing: Any) -> None:
        self.placing = placing
        self._ids = itertools.count(1)
        self.by_id: dict[int, Any] = {}
        streams = self

        class Stream:
            def __init__(self, device: Any = None, priority: int = 0, **_: Any) -> None:
                self.stream_id = 0 if priority == "default" else next(streams._ids)
                self.cuda_stream = self.stream_id
                self.priority = 0 if priority == "default" else priority
                self.device = _cuda0()
                streams.by_id[self.stream_id] = self

            def query(self) -> bool:
                return True

            def synchronize(self) -> None:
                return None

            def wait_stream(self, stream: Any) -> None:
                return None

            def wait_event(self, event: Any) -> None:
                return None

            def record_event(self, event: Any = None) -> Any:
                event = event if event is not None else Event()
                event.record(self)
                return event

            def __eq__(self, other: object) -> bool:
                return isinstance(other, Stream) and other.stream_id == self.stream_id

            def __hash__(self) -> int:
                return hash(("fragviz-stream", self.stream_id))

            def __repr__(self) -> str:
                return f"<torch.cuda.Stream device=cuda:0 cuda_stream={self.cuda_stream:#x} (simulated)>"

        self.Stream = Stream
        self.default = Stream(priority="default")

    def current(self, device: Any = None) -> Any:
        return self.by_id.get(self.placing.stream, self.default)

    @contextmanager
    def using(self, stream: Any) -> Iterator[None]:
        before = self.placing.stream
        self.placing.stream = before if stream is None else stream.stream_id
        try:
            yield
        finally:
            self.placing.stream = before

    def set(self, stream: Any) -> None:
        self.placing.stream = stream.stream_id


class Event:
    """`torch.cuda.Event`: recorded at once (nothing runs behind the host), its times the host's clock."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> None:
        self.enable_timing = enable_timing
        self.at: float | None = None

    def record(self, stream: Any = None) -> None:
        self.at = time.perf_counter()

    def wait(self, stream: Any = None) -> None:
        return None

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        return None

    def elapsed_time(self, end: "Event") -> float:
        if self.at is None or end.at is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return (end.at - self.at) * 1000.0


class _DeviceContext:
    """`torch.cuda.device(i)` and `device_of(t)`: one device, nothing to switch."""

    def __init__(self, device: Any = None) -> None:
        self.idx = 0

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> bool:
        return False


def _cuda0() -> Any:
    import torch

    return torch.device("cuda", 0)


def _ignore(*args: Any, **kwargs: Any) -> None:
    return None


def _answers(device: SimulatedDevice, streams: Streams, rng_state: Any) -> dict[str, Callable[..., Any]]:
    """torch.cuda's functions as the simulated device answers them, by name."""
    stats = lambda *a, **k: memory_stats(device)  # noqa: E731
    figure = lambda key: lambda *a, **k: memory_stats(device)[key]  # noqa: E731
    return {
        "is_available": lambda: True, "is_initialized": lambda: True, "init": _ignore, "device_count": lambda: 1,
        "current_device": lambda: 0, "set_device": _ignore, "synchronize": _ignore, "ipc_collect": _ignore,
        "get_device_name": lambda *a, **k: DEVICE_NAME, "get_device_capability": lambda *a, **k: CAPABILITY,
        "get_device_properties": lambda *a, **k: DeviceProperties(DEVICE_NAME, device.alloc.capacity),
        "is_bf16_supported": lambda *a, **k: True, "is_tf32_supported": lambda *a, **k: True,
        "get_arch_list": lambda: [], "device": _DeviceContext, "device_of": type("device_of", (_DeviceContext,), {}),
        "memory_stats": stats, "memory_stats_as_nested_dict": stats,
        "memory_allocated": figure("allocated_bytes.all.current"),
        "max_memory_allocated": figure("allocated_bytes.all.peak"),
        "memory_reserved": figure("reserved_bytes.all.current"), "memory_cached": figure("reserved_bytes.all.current"),
        "max_memory_reserved": figure("reserved_bytes.all.peak"),
        "max_memory_cached": figure("reserved_bytes.all.peak"),
        "reset_peak_memory_stats": lambda *a, **k: reset_peaks(device),
        "reset_max_memory_allocated": lambda *a, **k: reset_peaks(device),
        "reset_max_memory_cached": lambda *a, **k: reset_peaks(device), "reset_accumulated_memory_stats": _ignore,
        "empty_cache": lambda: empty_cache(device),
        "mem_get_info": lambda *a, **k: (device.alloc.device_free(), device.alloc.capacity),
        "set_per_process_memory_fraction": lambda fraction, *a, **k: _set_fraction(device, fraction),
        "memory_snapshot": lambda *a, **k: _snapshot(device)["segments"],
        "_snapshot": lambda *a, **k: _snapshot(device), "_record_memory_history": _ignore,
        "_dump_snapshot": lambda filename="dump_snapshot.pickle": write_snapshot(filename, _snapshot(device)),
        "Stream": streams.Stream, "Event": Event, "stream": streams.using, "current_stream": streams.current,
        "default_stream": lambda *a, **k: streams.default, "set_stream": streams.set,
        "get_rng_state": lambda *a, **k: rng_state.clone(), "set_rng_state": _ignore,
        "get_rng_state_all": lambda: [rng_state.clone()], "set_rng_state_all": _ignore,
    }


def _loading(device: SimulatedDevice, real: Callable[..., Any]) -> Callable[..., Any]:
    """torch.load with the storages whose location is CUDA (saved there, or mapped there by `map_location`) read
    onto the host and placed on the simulated device."""
    from fragviz.allocator.cudasim import device_type

    def load(f: Any, map_location: Any = None, *args: Any, **kwargs: Any) -> Any:
        if device_type(map_location) not in (None, "cuda", "cpu"):  # meta and others: PyTorch's own way
            return real(f, map_location, *args, **kwargs)

        def restore(storage: Any, location: str) -> Any:
            if callable(map_location):
                mapped = map_location(storage, location)
                if mapped is not None:
                    return mapped
            elif isinstance(map_location, dict):
                location = map_location.get(location, location)
            elif map_location is not None:
                location = str(map_location)
            if device_type(location) == "cuda":
                device.place_on_cuda()
                device.track(storage)
            return storage

        return real(f, restore, *args, **kwargs)

    return load


def _record_stream(self: Any, stream: Any) -> None:
    """Tensor.record_stream: nothing runs behind the host, so a block is never in use past its free."""
    return None


def _own(answer: Any) -> Any:
    """A function of its own for each name (torch._dynamo's rules refuse one function under two names)."""
    if isinstance(answer, type):
        return answer
    return lambda *args, **kwargs: answer(*args, **kwargs)


def _set_fraction(device: SimulatedDevice, fraction: float) -> None:
    if not 0 <= fraction <= 1:
        raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
    with device.lock:
        device.alloc.settings = replace(device.alloc.settings, memory_fraction=float(fraction))


def _snapshot(device: SimulatedDevice) -> dict[str, Any]:
    from fragviz.allocator.recorder import simulated_provenance

    return device.snapshot(simulated_provenance(device, "fragviz.simulated-cuda"), close=False)


@contextmanager
def simulated_cuda(device: SimulatedDevice, placing: Any) -> Iterator[None]:
    """Answer torch.cuda (and torch.cuda.memory, where the memory functions live) from `device` in the block."""
    import torch
    import torch.cuda.memory

    answers = {name: _own(answer) for name, answer in _answers(device, Streams(placing), torch.get_rng_state()).items()}
    saved: list[tuple[Any, str, Any]] = [(torch.Tensor, "record_stream", torch.Tensor.record_stream),
                                         (torch, "load", torch.load), (torch.serialization, "load", torch.load)]
    torch.Tensor.record_stream = _record_stream  # its parser refuses the simulated streams before any mode sees them
    torch.load = torch.serialization.load = _loading(device, torch.load)
    for module in (torch.cuda, torch.cuda.memory):
        for name, answer in answers.items():
            if module is torch.cuda or hasattr(module, name):
                saved.append((module, name, getattr(module, name, _MISSING)))
                setattr(module, name, answer)
    try:
        with _cuda_autocast():
            yield
    finally:
        for module, name, real in reversed(saved):
            if real is _MISSING:
                delattr(module, name)
            else:
                setattr(module, name, real)


@contextmanager
def _cuda_autocast() -> Iterator[None]:
    """torch.autocast("cuda") (and torch.cuda.amp.autocast) as the CPU's autocast, in float16 unless told otherwise:
    the tensors are CPU tensors, which CUDA's autocast would leave alone."""
    import torch
    from torch.amp.autocast_mode import autocast

    real = autocast.__init__

    def __init__(self: Any, device_type: str, dtype: Any = None, enabled: bool = True,
                 cache_enabled: bool | None = None) -> None:
        if device_type == "cuda":
            device_type, dtype = "cpu", dtype if dtype is not None else torch.float16
        real(self, device_type, dtype, enabled, cache_enabled)

    autocast.__init__ = __init__
    try:
        yield
    finally:
        autocast.__init__ = real
