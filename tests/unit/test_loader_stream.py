"""The loader reads an uncompressed pickle as it decodes it (never holding the file's bytes beside the data):
the same data and the same one-line errors as decoding the bytes, and a fair estimate of the memory it needs."""
from __future__ import annotations

import glob
import io
import os
import pickle
import tracemalloc

import pytest

import fragviz.snapshot.loader as loader
import fragviz.snapshot.memory as memory
import fragviz.snapshot.unpickle as unpickle
from fragviz.base.errors import SnapshotFormatError
from fragviz.base.limits import Limits
from tests.support.helpers import REAL


def both(path: str):
    """What the file decodes to, or the error it gets, by the streaming path and by the bytes path."""
    out = []
    for decode in (lambda: loader.decode_file(path, "f.pickle", "digest", Limits.current()),
                   lambda: loader.decode_bytes(open(path, "rb").read(), "f.pickle", "digest")):
        try:
            raw = decode()
            out.append((raw.data, raw.encoding, raw.pickle_protocol, raw.file_size, raw.payload_size))
        except SnapshotFormatError as exc:
            out.append(str(exc))
    return out


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(REAL, "*.pickle")))[:8], ids=os.path.basename)
def test_a_real_file_decodes_the_same_streamed(path):
    streamed, whole = both(path)
    assert streamed == whole


@pytest.mark.parametrize("content", [
    pickle.dumps({"segments": []}, protocol=4)[:-3],  # truncated
    b"\x80\x09junk",  # an unknown protocol
    b"\x80\x04cos\nsystem\n.",  # a global
    b"\x80\x04\x95\xff\xff\xff\xff\xff\xff\xff\x7f",  # a frame longer than the file
])
def test_broken_pickles_get_the_same_error_streamed(tmp_path, content):
    path = tmp_path / "f.pickle"
    path.write_bytes(content)
    streamed, whole = both(str(path))
    assert isinstance(streamed, str) and streamed == whole


def test_the_digest_is_read_in_chunks_and_is_the_file_s_sha256(tmp_path, monkeypatch):
    import hashlib

    monkeypatch.setattr(loader, "_CHUNK", 7)
    path = tmp_path / "f.pickle"
    path.write_bytes(pickle.dumps({"segments": [1] * 100}))
    assert loader.file_digest(str(path), "f", Limits.current()) == hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_memory_estimate_is_near_what_decoding_takes(monkeypatch):
    path = os.path.join(REAL, "hanmin_train_19k.pickle")
    data = open(path, "rb").read()
    monkeypatch.setattr(unpickle, "SAMPLE_SIZE", len(data) // 4)
    estimate, sampled = loader.estimated_memory(io.BytesIO(data), len(data))
    assert sampled == len(data) // 4
    tracemalloc.start()
    decoded = pickle.loads(data)  # noqa: S301  a real snapshot the test trusts
    taken = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del decoded
    assert 0.7 * taken < estimate < 1.5 * taken, (estimate, taken)


def test_a_file_too_large_for_the_memory_available_is_refused_before_decoding(tmp_path, monkeypatch):
    path = tmp_path / "big.pickle"
    path.write_bytes(pickle.dumps({"segments": [], "device_traces": [[{"action": "alloc", "addr": i, "size": 512,
                                                                        "stream": 0} for i in range(50000)]]}))
    monkeypatch.setattr(memory, "memory_available", lambda: 4 << 20)
    monkeypatch.setattr(unpickle, "SAMPLE_SIZE", 1 << 18)
    with pytest.raises(SnapshotFormatError) as info:
        loader.decode_file(str(path), "big.pickle", "d", Limits.current())
    message = str(info.value)
    assert message.startswith("big.pickle: needs about ") and "of memory to decode" in message
    assert message.endswith("4.00 MiB is available") and "\n" not in message
