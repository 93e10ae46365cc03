"""The second benchmark shape: a real training trace's requests and call stacks, replayed on several devices.

fragviz.allocator.synth (the first shape) draws its workload and its 10-frame stacks at random, on one device. This
one takes a real snapshot's trace (by default hanmin_train_19k, a training loop recorded with
context='all': 37 frames per event, C++ and Python) and repeats its sequence of requests, sizes and stacks
through fragviz's allocator model on `devices` devices, each starting at another point of the sequence.
Every event carries the real frames, written as PyTorch writes them: an alloc has its own frames list, a free
request and its completion share one, and the frame dicts themselves are shared.

The file is written as it is generated, by a small pickle writer with its own memo (frame dicts and strings
memoized once, trace entries never), so a 40M-event file takes no more memory to write than a small one.

    python bench/realshape.py OUT --events N [--devices D] [--source SNAPSHOT]
"""
from __future__ import annotations

import argparse
import os
import pickle
import struct
import sys
from typing import Any, BinaryIO, Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from fragviz.allocator.config import DEFAULT_SETTINGS  # noqa: E402
from fragviz.allocator.sim import DeviceAllocator  # noqa: E402
from fragviz.allocator.state import allocator_segments  # noqa: E402
from fragviz.model import PROVENANCE_KEY  # noqa: E402

DEFAULT_SOURCE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..", "shared",
                              "real_snapshots", "hanmin_train_19k.pickle")
_T0_US = 1_764_000_000_000_000
BATCH = 1000  # entries per APPENDS, as pickle itself writes lists


class StreamPickler:
    """Protocol 2 pickle opcodes written straight to a file: dicts, lists, str, int, float, bool, None.

    Strings are memoized by value and objects passed as `shared` by identity, so repeated frames cost a
    memo reference; everything else is written inline and never kept.
    """

    def __init__(self, fh: BinaryIO) -> None:
        self.fh = fh
        self.memo: dict[Any, int] = {}
        self.puts = 0  # memo indices used (a key put again gets a new one)
        self.fh.write(b"\x80\x02")

    def raw(self, opcodes: bytes) -> None:
        self.fh.write(opcodes)

    def _put(self, key: Any) -> bytes:
        index = self.memo[key] = self.puts
        self.puts += 1
        return b"q" + bytes((index,)) if index < 256 else b"r" + struct.pack("<I", index)

    def _get(self, index: int) -> bytes:
        return b"h" + bytes((index,)) if index < 256 else b"j" + struct.pack("<I", index)

    def encode(self, obj: Any, shared: bool = False) -> bytes:
        """The opcodes that push `obj`; with `shared`, a dict or list is memoized by identity."""
        if shared and id(obj) in self.memo:
            return self._get(self.memo[id(obj)])
        if isinstance(obj, str):
            key = ("s", obj)
            if key in self.memo:
                return self._get(self.memo[key])
            data = obj.encode("utf-8", "surrogatepass")
            return b"X" + struct.pack("<I", len(data)) + data + self._put(key)
        if obj is None:
            return b"N"
        if isinstance(obj, bool):
            return b"\x88" if obj else b"\x89"
        if isinstance(obj, int):
            return _int(obj)
        if isinstance(obj, float):
            return b"G" + struct.pack(">d", obj)
        if isinstance(obj, dict):
            head = b"}" + (self._put(id(obj)) if shared else b"")
            if not obj:
                return head
            return head + b"(" + b"".join(self.encode(k) + self.encode(v) for k, v in obj.items()) + b"u"
        if isinstance(obj, (list, tuple)):
            head = b"]" + (self._put(id(obj)) if shared else b"")
            if not obj:
                return head
            return head + b"(" + b"".join(self.encode(v, shared=isinstance(v, dict) and shared) for v in obj) + b"e"
        raise TypeError(f"cannot write {type(obj).__name__}")

    def once(self, cache: dict, key: Any, encode: Callable[[], bytes]) -> bytes:
        """`encode()`'s opcodes, cached under `key`: the first time as they come (PUTs for what is new), after
        that its second result, which is only memo references and never changes."""
        done = cache.get(key)
        if done is None:
            first = encode()
            cache[key] = encode()
            return first
        return done

    def close(self) -> None:
        self.fh.write(b".")


def _int(v: int) -> bytes:
    if 0 <= v < 256:
        return b"K" + bytes((v,))
    if 0 <= v < 65536:
        return b"M" + struct.pack("<H", v)
    if -(1 << 31) <= v < (1 << 31):
        return b"J" + struct.pack("<i", v)
    data = v.to_bytes((v.bit_length() + 8) // 8, "little", signed=True)
    return b"\x8a" + bytes((len(data),)) + data


def source_requests(path: str) -> list[tuple[str, int, int, list]]:
    """The source trace as requests: ("alloc", block key, size, frames) and ("free", block key, 0, frames)."""
    with open(path, "rb") as fh:
        data = pickle.load(fh)  # noqa: S301  the benchmark's own input, a snapshot from shared/real_snapshots
    trace = max(data["device_traces"], key=len)
    live: dict[int, int] = {}
    requests = []
    for e in trace:
        if e["action"] == "alloc":
            live[e["addr"]] = key = len(requests)
            requests.append(("alloc", key, e["size"], e.get("frames") or []))
        elif e["action"] == "free_requested" and e["addr"] in live:
            requests.append(("free", live.pop(e["addr"]), 0, e.get("frames") or []))
    if not requests:
        raise SystemExit(f"{path}: its trace has no allocations to repeat")
    return requests


class _Device:
    """One device's allocator running the request sequence from `start`, its trace streamed out."""

    def __init__(self, device: int, requests: list, start: int, events: int, out: StreamPickler) -> None:
        self.alloc = DeviceAllocator(DEFAULT_SETTINGS, device=device, va_base=0x7F00_0000_0000 - device * (1 << 40))
        self.requests, self.position, self.events = requests, start, events
        self.stacks: list[list] = []  # stack index (as the allocator records it) -> the source's frames list
        self.blocks: dict[int, Any] = {}  # the source's block key -> the block serving it in this pass
        self.written = 0
        self.time_us = _T0_US
        self.out = out
        self.consts: dict[str, bytes] = {}
        self.frame_bytes: dict[int, bytes] = {}

    def run(self) -> None:
        self.out.raw(b"]")
        while self.written < self.events:
            self._step()
            self._flush()

    def _step(self) -> None:
        action, key, size, frames = self.requests[self.position]
        self.position += 1
        if action == "alloc":
            self.stacks.append(frames)
            block = self.alloc.malloc(size, 0, len(self.stacks) - 1)
            if block is not None:
                self.blocks[key] = block
        elif key in self.blocks:
            self.stacks.append(frames)
            block = self.blocks.pop(key)
            block.stack = len(self.stacks) - 1  # the free's own frames, as PyTorch records them
            self.alloc.free(block)
        if self.position == len(self.requests):  # end of a pass: blocks the source never freed go now
            self.position = 0
            for block in self.blocks.values():
                self.alloc.free(block)
            self.blocks.clear()

    def _flush(self) -> None:
        # Whole requests only (a free request and its completion stay together, and the final segments hold
        # what the trace did): a device's trace may pass `events` by the few entries of its last request.
        entries, self.alloc.trace = self.alloc.trace, []
        for lo in range(0, len(entries), BATCH):
            parts = [b"("]
            for e in entries[lo:lo + BATCH]:
                parts.append(self._entry(e))
            parts.append(b"e")
            self.out.raw(b"".join(parts))
        self.written += len(entries)

    def _entry(self, e: dict) -> bytes:
        out = self.out
        self.time_us += 7
        action = e["action"]
        frames = self.stacks[e["stack"]] if e["stack"] >= 0 else []
        body = (self._const("action") + self._const(action) + self._const("addr") + _int(e.get("addr", 0))
                + self._const("size") + _int(e["size"]) + self._const("stream") + b"K\x00"
                + self._const("time_us") + _int(self.time_us) + self._const("frames"))
        # A free request and its completion share one list (memoized at the request); an alloc has its own.
        if action == "free_completed" and id(frames) in out.memo:
            listed = out.encode(frames, shared=True)
        else:
            put = out._put(id(frames)) if action == "free_requested" else b""
            items = out.once(self.frame_bytes, id(frames), lambda: b"".join(out.encode(f, shared=True) for f in frames))
            listed = b"]" + put + (b"(" + items + b"e" if frames else b"")
        return b"}(" + body + listed + b"u"

    def _const(self, text: str) -> bytes:
        """A memoized string's opcodes (its PUT the first time, then a GET)."""
        return self.out.once(self.consts, text, lambda: self.out.encode(text))


def _segments(out: StreamPickler, segments: list[dict]) -> bytes:
    """The segments list, its blocks' frame dicts memoized (shared with the trace's)."""
    # Encoding assigns memo indices, so every piece is encoded in the order it is written.
    def block(b: dict) -> bytes:
        frames = b.pop("frames")
        head = out.encode(b)[:-1] + out.encode("frames")
        return head + (b"](" + b"".join(out.encode(f, shared=True) for f in frames) + b"e" if frames else b"]") + b"u"

    def segment(seg: dict) -> bytes:
        blocks = seg.pop("blocks")
        head = out.encode(seg)[:-1] + out.encode("blocks")
        return head + (b"](" + b"".join(block(b) for b in blocks) + b"e" if blocks else b"]") + b"u"

    return b"](" + b"".join(segment(s) for s in segments) + b"e" if segments else b"]"


def write_realshape(path: str, events: int, devices: int = 2, source: str = DEFAULT_SOURCE) -> None:
    """Write the snapshot (`events` events in all, or a few more, split over `devices`) to `path`."""
    requests = source_requests(source)
    tmp = path + ".tmp"
    with open(tmp, "wb") as fh:
        out = StreamPickler(fh)
        out.raw(b"}(" + out.encode("device_traces") + b"](")
        devs = []
        for d in range(devices):
            dev = _Device(d, requests, (d * len(requests)) // max(1, devices), events // devices, out)
            dev.run()
            devs.append(dev)
        out.raw(b"e")
        segments = []
        for dev in devs:
            for seg in allocator_segments(dev.alloc):
                seg["frames"] = []
                for b in seg["blocks"]:
                    stack = b.pop("stack")
                    b["frames"] = dev.stacks[stack] if stack >= 0 else []
                segments.append(seg)
        provenance = {"origin": "synthetic", "generator": "bench/realshape.py",
                      "source": os.path.basename(source), "devices": devices}
        out.raw(out.encode("segments") + _segments(out, segments) + out.encode("allocator_settings")
                + out.encode(DEFAULT_SETTINGS.as_dict()) + out.encode(PROVENANCE_KEY) + out.encode(provenance) + b"u")
        out.close()
    os.replace(tmp, path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--devices", type=int, default=2)
    ap.add_argument("--source", default=DEFAULT_SOURCE)
    args = ap.parse_args()
    write_realshape(args.out, args.events, args.devices, args.source)
    return 0


if __name__ == "__main__":
    sys.exit(main())
