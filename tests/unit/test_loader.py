"""The safe loader: every encoding it accepts, and every hostile or broken input it refuses in one line."""
from __future__ import annotations

import gzip
import json
import os
import pickle
import zlib

import pytest

from fragviz.base.errors import SnapshotFormatError
from fragviz.snapshot import load_snapshot
from fragviz.snapshot.loader import read_raw
from tests.support.helpers import MiB, block, ev, segment, snapshot, write_pickle


def small_snapshot() -> dict:
    seg = segment(0x1000_0000, [block(0x1000_0000, 2 * MiB, requested=2 * MiB - 100),
                                block(0x1020_0000, 18 * MiB, "inactive", 0)])
    trace = [ev("segment_alloc", 0x1000_0000, 20 * MiB), ev("alloc", 0x1000_0000, 2 * MiB - 100)]
    return snapshot([seg], trace)


def refusal(path: str) -> str:
    with pytest.raises(SnapshotFormatError) as info:
        load_snapshot(path)
    message = str(info.value)
    assert "\n" not in message, "errors are one line"
    assert os.path.basename(path) in message, "errors name the file"
    return message


@pytest.mark.parametrize("protocol", [0, 1, 2, 3, 4, 5])
def test_every_pickle_protocol_loads_the_same(tmp_path, protocol):
    path = write_pickle(str(tmp_path / f"p{protocol}.pickle"), small_snapshot(), protocol)
    snap = load_snapshot(path)
    assert snap.format.encoding == "pickle"
    assert snap.format.pickle_protocol == (protocol if protocol >= 2 else None)
    assert [s.total_size for s in snap.segments] == [20 * MiB]
    assert snap.trace_of(0).action_counts() == {"segment_alloc": 1, "alloc": 1}


def test_gzip_and_json_load_like_the_pickle(tmp_path):
    data = small_snapshot()
    gz = tmp_path / "s.pickle.gz"
    gz.write_bytes(gzip.compress(pickle.dumps(data, protocol=4)))
    js = tmp_path / "s.json"
    js.write_text(json.dumps(data))
    jsgz = tmp_path / "s.json.gz"
    jsgz.write_bytes(gzip.compress(json.dumps(data).encode()))
    base = load_snapshot(write_pickle(str(tmp_path / "s.pickle"), data))
    for path, enc, comp in ((gz, "pickle", "gzip"), (js, "json", None), (jsgz, "json", "gzip")):
        snap = load_snapshot(str(path))
        assert (snap.format.encoding, snap.format.compression) == (enc, comp)
        assert snap.segments == base.segments
        assert (snap.trace_of(0).addr == base.trace_of(0).addr).all()


class _Exploit:
    def __init__(self, func, arg):
        self.func, self.arg = func, arg

    def __reduce__(self):
        return (self.func, (self.arg,))


class SomeClass:
    pass


@pytest.mark.parametrize("payload,named", [
    (_Exploit(os.system, "touch {marker}"), "system"),
    (_Exploit(eval, "open({marker!r}, 'w')"), "eval"),
    ({"segments": [SomeClass()]}, "SomeClass"),
])
def test_hostile_pickles_are_refused_before_anything_runs(tmp_path, payload, named):
    marker = tmp_path / "pwned"
    if isinstance(payload, _Exploit):
        payload.arg = payload.arg.format(marker=str(marker))
    path = tmp_path / "evil.pickle"
    path.write_bytes(pickle.dumps(payload, protocol=4))
    message = refusal(str(path))
    assert "refuses to load global" in message and named in message
    assert not marker.exists()


def test_protocol_0_global_is_refused(tmp_path):
    path = tmp_path / "old.pickle"
    path.write_bytes(b"cos\nsystem\n(S'true'\ntR.")
    assert "os.system" in refusal(str(path))


@pytest.mark.parametrize("content,expected", [
    (b"", "is empty"),
    (b"\x89PNG\r\n\x1a\n" + b"\x00" * 64, "a PNG image"),
    (b"<html><body>hi</body></html>", "HTML"),
    (b"just some text", "unrecognised content"),
    (b"\x80\x09garbage", "unknown pickle protocol 9"),
])
def test_files_that_are_not_pickles(tmp_path, content, expected):
    path = tmp_path / "thing.pickle"
    path.write_bytes(content)
    assert expected in refusal(str(path))


def test_truncated_pickle(tmp_path):
    data = pickle.dumps(small_snapshot(), protocol=4)
    path = tmp_path / "cut.pickle"
    path.write_bytes(data[: len(data) // 2])
    message = refusal(str(path))
    assert "truncated" in message or "corrupt" in message


@pytest.mark.parametrize("data,expected", [
    (42, "top level is a int"),
    ({"weights": [1, 2]}, "no 'segments' or 'device_traces'"),
    ({"segments": "nope"}, "'segments' is not a list"),
    ({"segments": [{"address": 1}]}, "segment 0 has no 'total_size'"),
    ({"segments": [], "device_traces": [[{"action": "alloc", "addr": "x", "size": 1}]]}, "'addr' is 'x', not an integer"),
])
def test_pickles_of_things_that_are_not_snapshots(tmp_path, data, expected):
    path = write_pickle(str(tmp_path / "other.pickle"), data)
    assert expected in refusal(path)


def test_gzip_bomb_is_stopped_early(tmp_path):
    path = tmp_path / "bomb.pickle.gz"
    z = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    parts = [z.compress(b"\x80\x04")]
    zeros = bytes(MiB)
    parts.extend(z.compress(zeros) for _ in range(300))
    parts.append(z.flush())
    path.write_bytes(b"".join(parts))
    assert path.stat().st_size < 1 * MiB
    assert "decompression bomb" in refusal(str(path))


def test_gzip_of_something_else_is_refused_at_once(tmp_path):
    path = tmp_path / "img.pickle.gz"
    path.write_bytes(gzip.compress(b"\x89PNG\r\n\x1a\n" + bytes(100 * MiB)))
    assert "does not hold a snapshot" in refusal(str(path))


def test_truncated_gzip(tmp_path):
    blob = gzip.compress(pickle.dumps(small_snapshot()))
    path = tmp_path / "cut.pickle.gz"
    path.write_bytes(blob[: len(blob) - 10])
    assert "truncated" in refusal(str(path))


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(SnapshotFormatError, match="cannot be read"):
        read_raw(str(tmp_path / "absent.pickle"))
    with pytest.raises(SnapshotFormatError, match="is a directory"):
        read_raw(str(tmp_path))


def test_content_hash_is_of_the_file_bytes(tmp_path):
    import hashlib

    path = write_pickle(str(tmp_path / "s.pickle"), small_snapshot())
    raw = read_raw(path)
    assert raw.content_hash == hashlib.sha256(open(path, "rb").read()).hexdigest()
