"""Tensors moved between the host and the simulated CUDA device (fragviz.allocator.cudasim): `.cuda()`, `.cpu()`,
`.to(...)` in each of its forms, and `.pin_memory()`.

A move to the device copies a host tensor (as a copy to a GPU does) with the copy placed on the simulated device; a
tensor already there is returned as it is (a dtype or format change aside, made where the tensor is). A move back
copies it to the host. `non_blocking` is accepted and changes nothing: there is no real concurrency.
"""
from __future__ import annotations

from typing import Any, Callable

from fragviz.allocator.cudasim import CUDA, HOST, Placing, device_type, held, in_place
from fragviz.allocator.recorder import SimulatedDevice

_TO_NAMES = ("dtype", "non_blocking", "copy")  # Tensor.to(device, dtype, non_blocking, copy)


def moves(device: SimulatedDevice, placing: Placing) -> dict[Any, Callable]:
    import torch

    T = torch.Tensor

    def copy(t: Any, where: str, options: dict[str, Any]) -> Any:
        return in_place(placing, where, T.to, (t, "cpu"), {**options, "copy": True})

    def cuda(func: Callable, args: tuple, kwargs: dict) -> Any:
        t = args[0]
        if held(device, t):
            return t
        device.place_on_cuda()
        return copy(t, CUDA, {"memory_format": kwargs.get("memory_format", torch.preserve_format)})

    def cpu(func: Callable, args: tuple, kwargs: dict) -> Any:
        t = args[0]
        if not held(device, t):
            return func(*args, **kwargs)
        return copy(t, HOST, {"memory_format": kwargs.get("memory_format", torch.preserve_format)})

    def to(func: Callable, args: tuple, kwargs: dict) -> Any:
        t = args[0]
        target, options = _to_arguments(device, args[1:], kwargs)
        kind = device_type(target)
        if kind not in ("cuda", "cpu"):
            return func(*args, **kwargs)
        if kind == "cuda":
            device.place_on_cuda()
        if (kind == "cuda") == held(device, t):  # staying where it is: a dtype or format change at most
            return T.to(t, "cpu", **options) if kind == "cpu" else in_place(placing, CUDA, T.to, (t, "cpu"), options)
        return copy(t, CUDA if kind == "cuda" else HOST, options)

    def pin_memory(func: Callable, args: tuple, kwargs: dict) -> Any:
        t = args[0]
        if held(device, t):  # PyTorch's own refusal
            raise RuntimeError(f"cannot pin '{t.type().replace('torch.', 'torch.cuda.')}' only dense CPU tensors can "
                               "be pinned")
        return in_place(placing, HOST, T.clone, (t,), {})  # a host copy, as pinning makes one

    return {T.cuda: cuda, T.cpu: cpu, T.to: to, T.pin_memory: pin_memory}


def _to_arguments(device: SimulatedDevice, rest: tuple, kwargs: dict) -> tuple[Any, dict[str, Any]]:
    """Tensor.to's target device (None: no device named) and its other arguments as keywords, from any of its forms:
    to(dtype, ...), to(device, dtype, ...), to(other, ...), to(device=..., dtype=...)."""
    import torch

    options = dict(kwargs)
    target = options.pop("device", None)
    if rest and isinstance(rest[0], torch.Tensor):  # to(other, non_blocking, copy): other's device and dtype
        other = rest[0]
        target = "cuda" if held(device, other) else other.device
        rest = (other.dtype, *rest[1:])
    elif rest and device_type(rest[0]) is not None:
        target, rest = rest[0], rest[1:]
    options.update(zip(_TO_NAMES, rest))
    return target, options
