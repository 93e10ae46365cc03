"""CUDA code on a CPU: code written for a GPU runs unchanged, its device memory served by a simulated device.

Tensors stay ordinary CPU tensors (autograd, optimizers, every operator work as they do on the CPU); two modes on
the recording thread make them look and count as CUDA tensors:

- a `TorchFunctionMode` (`_Placing`) sees every call from Python before PyTorch's bindings do: a `device=` that
  names CUDA (`"cuda"`, `"cuda:N"`, `torch.device("cuda")`, an index) becomes the CPU, with the new storages
  placed on the simulated CUDA device; `.cuda()` and `.to("cuda")` copy a host tensor there, `.cpu()` and
  `.to("cpu")` copy one back; `.device`, `.is_cuda` and `.get_device()` answer as on CUDA for tensors on it;
  `.pin_memory()` is a host copy;
- a `TorchDispatchMode` (`_Serving`) sees every operator's outputs: a new storage goes to the simulated device when
  the operator was called to place it there, or when any of its inputs is there (what an operator on CUDA tensors
  makes is on CUDA); host tensors are never counted.

Until the code first places a tensor on CUDA, every CPU tensor counts (code that never names CUDA is recorded as
before); at that moment the device forgets the host tensors and starts again (`SimulatedDevice.place_on_cuda`).
`torch.cuda`'s functions are answered from the same device (`fragviz.allocator.cudaapi`).

What cannot be simulated (docs/recording.md): custom CUDA kernels (their C++ sees a CPU tensor and refuses it),
`torch.compile` with Triton, NCCL and CUDA graphs.
"""
from __future__ import annotations

import threading
from contextlib import ExitStack, contextmanager
from typing import Any, Callable, Iterator

from fragviz.allocator.recorder import CUDA_TENSORS, SimulatedDevice

CUDA, HOST = "cuda", "host"  # where the storages an operator makes go, when a call says so
# inside one of torch's own Python functions called with a tensor on the device: its body runs with the function
# mode off (it sees the CPU), so what it makes from nothing (torch.zeros(..., device=x.device)) goes to the device
WITH_INPUTS = "with inputs"


class Placing(threading.local):
    """Per thread: where the storages made now go (CUDA, HOST, WITH_INPUTS, or None: where the operator's inputs
    are) and the stream that allocations are made on (the simulated torch.cuda.stream's)."""

    where: str | None = None
    stream: int = 0


@contextmanager
def cuda_on_cpu(device: SimulatedDevice) -> Iterator[Placing]:
    """Run the block's CUDA code on the CPU, its device memory served by `device` (enter it on the thread that runs
    the workload: modes are per thread; the torch.cuda functions are answered process-wide until it ends)."""
    from fragviz.allocator.cudaapi import simulated_cuda

    placing = Placing()
    with ExitStack() as stack:
        stack.enter_context(simulated_cuda(device, placing))
        stack.enter_context(_serving_mode(device, placing))
        stack.enter_context(_placing_mode(device, placing))
        yield placing


def _storage(t: Any) -> Any:
    try:
        return t.untyped_storage()
    except (RuntimeError, NotImplementedError):  # a tensor without a storage (sparse, nested): never counted
        return None


def _storage_key(t: Any) -> int | None:
    storage = _storage(t)
    return None if storage is None else storage._cdata


def _serving_mode(device: SimulatedDevice, placing: Placing) -> Any:
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    Tensor = torch.Tensor

    def new_storages(out: Any, inputs: list[Any]) -> Iterator[Any]:
        seen = {_storage_key(t) for t in inputs}
        for t in tree_leaves(out):
            storage = _storage(t) if isinstance(t, Tensor) and t.device.type == "cpu" else None
            if storage is not None and storage._cdata not in seen:
                yield storage

    class _Serving(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if device.placement != CUDA_TENSORS:  # every CPU tensor counts
                for t in tree_leaves(out):
                    if isinstance(t, Tensor) and t.device.type == "cpu":
                        device.track(t.untyped_storage(), placing.stream)
                return out
            inputs = [t for t in tree_leaves((args, kwargs)) if isinstance(t, Tensor)]
            where = placing.where
            if where == CUDA or (where != HOST and any(held(device, t) for t in inputs)) or \
                    (where == WITH_INPUTS and not inputs):
                for storage in new_storages(out, inputs):
                    device.track(storage, placing.stream)
            return out

    return _Serving()


def _any_held(device: SimulatedDevice, args: tuple, kwargs: dict) -> bool:
    """Whether a call's arguments (or the lists among them) hold a tensor on the device."""
    import torch

    for value in (*args, *kwargs.values()):
        if isinstance(value, (list, tuple)):
            if any(isinstance(v, torch.Tensor) and held(device, v) for v in value):
                return True
        elif isinstance(value, torch.Tensor) and held(device, value):
            return True
    return False


def held(device: SimulatedDevice, t: Any) -> bool:
    """Whether a tensor is on the simulated CUDA device."""
    return device.placement == CUDA_TENSORS and device.holds_key(_storage_key(t))


def device_type(value: Any) -> str | None:
    """The type of device a device argument names ("cuda", "cpu", "meta", ...), None where it is not one."""
    import torch

    if isinstance(value, torch.device):
        return value.type
    if isinstance(value, str):
        return torch.device(value).type
    if isinstance(value, int) and not isinstance(value, bool):
        return "cuda"  # an index is a CUDA device's
    return None


def _placing_mode(device: SimulatedDevice, placing: Placing) -> Any:
    from torch.overrides import TorchFunctionMode

    handlers = _tensor_handlers(device, placing)
    constructors = _constructors()

    class _Placing(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            handler = handlers.get(func)
            if handler is not None:
                return handler(func, args, kwargs)
            if func in constructors and kwargs.get("device") is None and _default_device_is_cuda():
                kwargs = {**kwargs, "device": "cuda"}  # torch.set_default_device("cuda"): its mode is below ours
            if "device" in kwargs:
                return _placed(device, placing, func, args, kwargs)
            if placing.where is None and device.placement == CUDA_TENSORS and _any_held(device, args, kwargs):
                return in_place(placing, WITH_INPUTS, func, args, kwargs)
            return func(*args, **kwargs)

    return _Placing()


def _constructors() -> Any:
    """The functions torch.set_default_device gives a device to (torch.utils._device's list; none if it moved)."""
    try:
        from torch.utils._device import _device_constructors

        return _device_constructors()
    except (ImportError, AttributeError):
        return frozenset()


def _default_device_is_cuda() -> bool:
    """Whether torch.set_default_device named CUDA on this thread (its context sits at the bottom of the mode stack,
    under ours, and would hand the constructor a CUDA device after we have seen it)."""
    import torch

    context = getattr(getattr(torch, "_GLOBAL_DEVICE_CONTEXT", None), "device_context", None)
    return context is not None and device_type(getattr(context, "device", None)) == "cuda"


def _placed(device: SimulatedDevice, placing: Placing, func: Callable, args: tuple, kwargs: dict) -> Any:
    """A call with `device=`: CUDA becomes the CPU, and what it makes is placed on the simulated device."""
    kind = device_type(kwargs["device"])
    if kind == "cuda":
        device.place_on_cuda()
        return in_place(placing, CUDA, func, args, {**kwargs, "device": "cpu"})
    if kind == "cpu":
        return in_place(placing, HOST, func, args, kwargs)
    return func(*args, **kwargs)


def in_place(placing: Placing, where: str, func: Callable, args: tuple, kwargs: dict) -> Any:
    before, placing.where = placing.where, where
    try:
        return func(*args, **kwargs)
    finally:
        placing.where = before


def _tensor_handlers(device: SimulatedDevice, placing: Placing) -> dict[Any, Callable]:
    import torch

    from fragviz.allocator.tensor_moves import moves

    cuda0 = torch.device("cuda", 0)
    T = torch.Tensor
    handlers: dict[Any, Callable] = {
        T.device.__get__: lambda f, a, k: cuda0 if held(device, a[0]) else f(*a, **k),
        T.is_cuda.__get__: lambda f, a, k: True if held(device, a[0]) else f(*a, **k),
        T.is_cpu.__get__: lambda f, a, k: False if held(device, a[0]) else f(*a, **k),
        T.get_device: lambda f, a, k: 0 if held(device, a[0]) else f(*a, **k),
    }
    handlers.update(moves(device, placing))
    return handlers
