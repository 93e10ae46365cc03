"""NVML's view of a device (used memory, processes), when `nvidia-ml-py` is installed and a GPU is present.

Everything here answers None ("not available") instead of raising: a job must not fail because the
monitoring library is missing, too old, or has no driver to talk to.
"""
from __future__ import annotations

import threading
from typing import Any


class Nvml:
    """Lazily initialised NVML handles, matched to CUDA devices by UUID (CUDA_VISIBLE_DEVICES renumbers them)."""

    def __init__(self) -> None:
        self._lib: Any = None
        self._tried = False
        self._handles: dict[int, Any] = {}
        self._lock = threading.Lock()

    @property
    def available(self) -> bool:
        return self._library() is not None

    def _library(self) -> Any:
        with self._lock:
            if not self._tried:
                self._tried = True
                try:
                    import pynvml

                    pynvml.nvmlInit()
                    self._lib = pynvml
                except Exception:  # not installed, no driver, no GPU: NVML is simply not available
                    self._lib = None
            return self._lib

    def _handle(self, device: int, uuid: str | None) -> Any:
        lib = self._library()
        if lib is None:
            return None
        if device not in self._handles:
            try:
                self._handles[device] = (lib.nvmlDeviceGetHandleByUUID(uuid) if uuid
                                         else lib.nvmlDeviceGetHandleByIndex(device))
            except Exception:
                self._handles[device] = None
        return self._handles[device]

    def memory(self, device: int, uuid: str | None) -> dict[str, Any] | None:
        """{"total", "free", "used", "index" (physical), "processes": [{"pid", "used_bytes"}]} or None."""
        handle = self._handle(device, uuid)
        if handle is None:
            return None
        lib = self._lib
        try:
            info = lib.nvmlDeviceGetMemoryInfo(handle)
            procs = lib.nvmlDeviceGetComputeRunningProcesses(handle)
            index = int(lib.nvmlDeviceGetIndex(handle))  # the physical index, whatever CUDA_VISIBLE_DEVICES says
        except Exception:
            return None
        return {"total": int(info.total), "free": int(info.free), "used": int(info.used), "index": index,
                "processes": [{"pid": int(p.pid), "used_bytes": _used(p)} for p in procs]}


def _used(process: Any) -> int | None:
    value = getattr(process, "usedGpuMemory", None)
    # NVML_VALUE_NOT_AVAILABLE comes as None or as 2**64 - 1, depending on the binding's version
    return int(value) if isinstance(value, int) and 0 <= value < 2**63 else None
