"""Code what-ifs (fragviz.simulate.reshape): the options read (and refused in one line), the workload changed as
the code change would change it — sizes scaled, padded to buckets, split into pages with the allocation's
lifetime — a change that touches nothing refused with the reason, and the changed run's figures worked out by hand.

The traces are written by the allocator model itself (`DeviceAllocator(record=True)`); each allocation's stack is
one frame under train.py's main: model.py's `forward` lines are activations by fragviz's kind rules,
kv_cache.py's `append` the KV cache, train.py's `update` neither.
"""
from __future__ import annotations

import pickle

import pytest

from fragviz.allocator.config import parse_alloc_conf
from fragviz.allocator.sim import DeviceAllocator
from fragviz.allocator.state import snapshot_dict
from fragviz.base.errors import UsageError
from fragviz.model import Frame
from fragviz.replay.analysis import analyze
from fragviz.simulate.freerun import workload
from fragviz.simulate.records import CANNOT_ANSWER
from fragviz.simulate.reshape import (BUCKET, KV_CACHE, MAX_STEPS, PAGED_KV, SCALE, CodeChange, Reshaper,
                                      changes_label, parse_bucket, parse_paged_kv, parse_scale)
from fragviz.simulate.whatif import NothingToSimulate, simulate_device, simulated_snapshot, what_if, what_if_label
from fragviz.snapshot import load_snapshot_bytes
from tests.support.helpers import KiB, MiB

DEFAULT = parse_alloc_conf("")
SITES = {"fwd": ("/home/u/model.py", 30, "forward"), "fwd2": ("/home/u/model.py", 31, "forward"),
         "kv": ("/home/u/kv_cache.py", 12, "append"), "step": ("/home/u/train.py", 50, "update"),
         "bwd": ("/venv/torch/_tensor.py", 600, "backward"), "param": ("/venv/torch/nn/modules/linear.py", 9, "__init__")}
FRAMES = tuple(Frame(*where) for where in SITES.values()) + (Frame("/home/u/train.py", 7, "main"),)
STACKS = tuple((i, len(SITES)) for i in range(len(SITES)))
STACK = {name: i for i, name in enumerate(SITES)}


class Program:
    def __init__(self) -> None:
        self.a = DeviceAllocator(DEFAULT, None, record=True)

    def alloc(self, name: str, nbytes: int):
        return self.a.malloc(nbytes, 0, STACK[name])

    def analysis(self, name: str = "case.pickle"):
        data = snapshot_dict([self.a], FRAMES, STACKS, {"origin": "test"})
        return analyze(load_snapshot_bytes(pickle.dumps(data), name))


# -- the options -------------------------------------------------------------------------------------------------

def test_scale_reads_a_kind_or_a_site_and_a_factor():
    assert parse_scale("activations=1.5") == CodeChange(SCALE, "activations", factor=1.5)
    assert parse_scale(" model.py:forward = 0.5") == CodeChange(SCALE, "model.py:forward", factor=0.5)
    assert parse_scale("a=b=2").target == "a=b"  # the factor follows the last '='
    assert parse_scale("kv_cache=1000").factor == 1000


@pytest.mark.parametrize("text,problem", [
    ("activations", "write TARGET=FACTOR"), ("=2", "write TARGET=FACTOR"), ("activations=", "a number above 0"),
    ("activations=0", "a number above 0"), ("activations=-1", "a number above 0"),
    ("activations=x", "a number above 0"), ("activations=nan", "a number above 0"),
    ("activations=inf", "at most 1000"), ("activations=1000.5", "at most 1000")])
def test_a_bad_scale_is_refused_in_one_line(text, problem):
    with pytest.raises(UsageError) as refused:
        parse_scale(text)
    message = str(refused.value)
    assert message.startswith(f"--scale '{text}': ") and problem in message and "\n" not in message


def test_bucket_reads_a_kind_or_a_site_and_a_number_of_steps():
    assert parse_bucket("activations:8") == CodeChange(BUCKET, "activations", steps=8)
    assert parse_bucket("model.py:forward:8") == CodeChange(BUCKET, "model.py:forward", steps=8)
    assert parse_bucket(f"gpt.py:34:{MAX_STEPS}").steps == MAX_STEPS


@pytest.mark.parametrize("text", ["activations", ":8", "activations:0", "activations:x", "activations:1.5",
                                  "activations:-2", f"activations:{MAX_STEPS + 1}", "activations:²"])
def test_a_bad_bucket_is_refused_in_one_line(text):
    with pytest.raises(UsageError) as refused:
        parse_bucket(text)
    assert str(refused.value) == (f"--bucket '{text}': write TARGET:K (a kind or a site, then 1 to {MAX_STEPS} length "
                                  "buckets), e.g. activations:8")


def test_paged_kv_reads_a_page_size_and_an_optional_target():
    assert parse_paged_kv("2MiB") == CodeChange(PAGED_KV, KV_CACHE, page_bytes=2 * MiB)
    assert parse_paged_kv("=512") == CodeChange(PAGED_KV, KV_CACHE, page_bytes=512)
    assert parse_paged_kv("gpt.py:34=256KiB") == CodeChange(PAGED_KV, "gpt.py:34", page_bytes=256 * KiB)


def test_a_bad_page_is_refused_in_one_line():
    with pytest.raises(UsageError) as small:
        parse_paged_kv("gpt.py:34=511B")
    assert str(small.value) == ("--paged-kv 'gpt.py:34=511B': a page holds at least 512 bytes (the allocator's "
                                "rounding)")
    with pytest.raises(UsageError) as unreadable:
        parse_paged_kv("gpt.py:34=big")
    assert str(unreadable.value).startswith("'big' is not a size: ")


def test_each_change_has_a_label_and_the_option_that_asks_for_it():
    changes = [parse_scale("activations=1.5"), parse_bucket("gpt.py:34:8"), parse_paged_kv("2MiB"),
               parse_paged_kv("cache.py:append=256KiB")]
    assert [c.label for c in changes] == ["activations and temporaries ×1.5", "site 'gpt.py:34' in 8 length buckets",
                                          "KV cache in 2.00 MiB pages", "site 'cache.py:append' in 256.00 KiB pages"]
    assert [c.flag for c in changes] == ["--scale activations=1.5", "--bucket gpt.py:34:8",
                                         f"--paged-kv {2 * MiB}B", f"--paged-kv cache.py:append={256 * KiB}B"]
    parse = {"--scale": parse_scale, "--bucket": parse_bucket, "--paged-kv": parse_paged_kv}
    for c in changes:  # each option reads back as the change
        option, value = c.flag.split(" ", 1)
        assert parse[option](value) == c
    assert changes_label(changes[:2]) == "activations and temporaries ×1.5, site 'gpt.py:34' in 8 length buckets"
    assert what_if_label(None, changes[:1]) == "activations and temporaries ×1.5"
    assert what_if_label("", changes[:1]) == "activations and temporaries ×1.5, under the default settings"


# -- the workload changed ----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def mixed():
    """Activations at two sites (1000, 1300, 2000, 1999 bytes at one, 100 and 300 at the other), two KV cache
    allocations (5000 and 4096 bytes; the second freed while the stream still uses it) and two others."""
    p = Program()
    x1, x2, x3 = p.alloc("fwd", 1000), p.alloc("fwd", 1300), p.alloc("fwd", 2000)
    p.a.free(x1)
    p.a.free(x2)
    x4 = p.alloc("fwd", 1999)
    y1, y2 = p.alloc("fwd2", 100), p.alloc("fwd2", 300)
    e, f, g = p.alloc("kv", 5000), p.alloc("kv", 4096), p.alloc("step", 3 * MiB)
    p.a.free(e)
    p.a.free(f, pending=True)
    h = p.alloc("step", 1 * MiB)
    p.a.complete(f)
    for b in (x3, x4, y1, y2, g, h):
        p.a.free(b)
    return p.analysis("mixed.pickle")


def reshaped(analysis, *changes: CodeChange):
    trace = analysis.replays[0].trace
    shaper = Reshaper(trace, analysis.snapshot.stack_frames, changes)
    return shaper, list(workload(trace)), list(shaper(workload(trace)))


def alloc_sizes(ops) -> list[int]:
    return [op.size for op in ops if op.kind == "alloc"]


RECORDED_SIZES = [1000, 1300, 2000, 1999, 100, 300, 5000, 4096, 3 * MiB, 1 * MiB]


def test_scale_multiplies_the_target_s_sizes_rounding_up(mixed):
    shaper, before, after = reshaped(mixed, parse_scale("activations=1.5"))
    assert alloc_sizes(before) == RECORDED_SIZES
    assert alloc_sizes(after) == [1500, 1950, 3000, 2999, 150, 450, 5000, 4096, 3 * MiB, 1 * MiB]  # 2998.5 → 2999
    assert [(op.kind, op.event, op.key) for op in after] == [(op.kind, op.event, op.key) for op in before]
    assert shaper.touched(0) == (6, 1000 + 1300 + 2000 + 1999 + 100 + 300)
    _, _, tiny = reshaped(mixed, parse_scale("model.py:31=0.001"))
    assert alloc_sizes(tiny)[4:6] == [1, 1]  # 0.1 and 0.3 bytes: one byte each


def test_two_scales_multiply_and_a_site_is_text_of_a_frame(mixed):
    _, _, after = reshaped(mixed, parse_scale("activations=2"), parse_scale("model.py:30=1.5"))
    assert alloc_sizes(after)[:6] == [3000, 3900, 6000, 5997, 200, 600]
    _, _, by_function = reshaped(mixed, parse_scale("kv_cache.py:append=2"))
    assert alloc_sizes(by_function)[6:8] == [10000, 8192]


def lengths_program(extra=()):
    """Steps of lengths 3, 10, 5, 8: at model.py:30 64·L bytes (a linear family), at model.py:31 4·L² (a
    quadratic one), 96·L (another linear one) and a 300-byte statistic; the backward's gradients of 64·L and a
    parameter's 192-byte gradient (192 = 64·3: a parameter's size, so never resized)."""
    p = Program()
    p.alloc("param", 192)
    for length in (3, 10, 5, 8):
        blocks = [p.alloc("fwd", 64 * length), p.alloc("fwd2", 4 * length * length), p.alloc("fwd2", 96 * length),
                  p.alloc("fwd2", 300), p.alloc("bwd", 64 * length), p.alloc("bwd", 192)]
        for b in blocks:
            p.a.free(b)
    return p.analysis("lengths.pickle")


def test_bucket_pads_lengths_and_every_size_of_their_families():
    # lengths 3..10 in 2 buckets: tops 3 + ceil(7/2) = 7 and 10; 3 and 5 go to 7, 10 and 8 to 10
    shaper, _, after = reshaped(lengths_program(), parse_bucket("activations:2"))
    assert alloc_sizes(after) == [192] + [
        64 * 7, 4 * 49, 96 * 7, 300, 192, 192,  # the backward's 64·3 has a parameter's size: left
        64 * 10, 4 * 100, 96 * 10, 300, 64 * 10, 192,
        64 * 7, 4 * 49, 96 * 7, 300, 64 * 7, 192,
        64 * 10, 4 * 100, 96 * 10, 300, 64 * 10, 192]
    assert shaper.touched(0) == (16 + 3, 64 * 26 + 4 * 198 + 96 * 26 + 300 * 4 + 64 * 23)  # lengths sum to 26
    note, left = shaper.notes()
    assert left.startswith("activations and temporaries in 2 length buckets left as recorded 4 of its target's "
                           "allocations (1.17 KiB)")  # the 300-byte statistics
    assert note == ("activations and temporaries in 2 length buckets pads lengths, not bytes: 4 lengths seen, 3 to 10, "
                    "each padded up to the next of the bucket lengths 7, 10 (evenly spaced over the lengths seen); 3 "
                    "length families (64 B·L, 96 B·L, 4 B·L²); 15 allocations resized, 6.27 KiB → 8.16 KiB, 3 of them of "
                    "other kinds, of the same families (gradients 3: the backward pass's derivatives, the input batch)")


def test_a_site_s_bucket_reads_the_run_s_lengths_and_pads_only_its_own_families():
    """model.py:31's one stack mixes three sizes' families, so the lengths come from the run's other stacks
    (model.py:30: 64·L); its families are 4·L² and 96·L, so 64·L (at model.py:30 and the backward) stays."""
    shaper, _, after = reshaped(lengths_program(), parse_bucket("model.py:31:4"))  # tops 3 + ceil(7j/4): 5, 7, 9, 10
    assert alloc_sizes(after)[1:7] == [64 * 3, 4 * 25, 96 * 5, 300, 64 * 3, 192]
    assert alloc_sizes(after)[7:13] == [64 * 10, 4 * 100, 96 * 10, 300, 64 * 10, 192]
    assert shaper.notes()[1] == ("site 'model.py:31' in 4 length buckets left as recorded 4 of its target's "
                                 "allocations (1.17 KiB) whose size is in no length family (constants, statistics, "
                                 "parameters and optimizer state)")


def test_a_site_of_one_size_is_left_as_it_is():
    p = Program()
    blocks = [p.alloc("fwd", 4096), p.alloc("fwd", 4096), p.alloc("kv", 700)]
    for b in blocks:
        p.a.free(b)
    shaper, _, after = reshaped(p.analysis(), parse_bucket("activations:4"))
    assert alloc_sizes(after) == [4096, 4096, 700] and shaper.refusal(0) is None
    assert shaper.notes() == ("activations and temporaries in 4 length buckets found no length family among its "
                              "target's allocations (no sizes c·L or c·L² for a set of lengths a stack requested): "
                              "nothing is padded",)


def test_paged_kv_splits_each_allocation_into_pages_that_live_as_long(mixed):
    shaper, before, after = reshaped(mixed, parse_paged_kv("2KiB"))
    size_of = {op.key: op.size for op in before if op.kind == "alloc"}  # each allocation named by its size

    def read(op) -> str:
        paged = op.key not in size_of
        name = size_of[op.key[0] if paged else op.key]
        return (f"{op.kind} {name}" + (f" page {op.key[1]}" if paged else "") + (" pending" if op.pending else "")
                + (f": {op.size}" if op.kind == "alloc" and paged else ""))

    assert [read(op) for op in after] == [
        "alloc 1000", "alloc 1300", "alloc 2000", "free 1000", "free 1300", "alloc 1999", "alloc 100", "alloc 300",
        "alloc 5000 page 0: 2048", "alloc 5000 page 1: 2048", "alloc 5000 page 2: 2048",  # 5000 bytes: 3 pages
        "alloc 4096 page 0: 2048", "alloc 4096 page 1: 2048",  # exactly 2
        f"alloc {3 * MiB}",
        "free 5000 page 0", "free 5000 page 1", "free 5000 page 2",
        "free 4096 page 0 pending", "free 4096 page 1 pending",  # freed while the stream still uses it ...
        f"alloc {1 * MiB}",
        "complete 4096 page 0", "complete 4096 page 1",  # ... and returned when it completes
        "free 2000", "free 1999", "free 100", "free 300", f"free {3 * MiB}", f"free {1 * MiB}"]
    e, f = (op.event for op in before if op.kind == "alloc" and op.size in (5000, 4096))
    assert [op.event for op in after if op.kind == "alloc"][6:11] == [e, e, e, f, f]  # the pages: the request's event
    assert shaper.effects() == ({"change": PAGED_KV, "target": KV_CACHE, "factor": None, "steps": None,
                                 "page_bytes": 2048, "label": "KV cache in 2.00 KiB pages", "allocations": 2,
                                 "recorded_bytes": 9096},)


def test_changes_apply_in_order_scale_before_pages(mixed):
    _, _, after = reshaped(mixed, parse_scale("kv_cache=2"), parse_paged_kv("4KiB"))
    assert alloc_sizes(after).count(4096) == 3 + 2  # 10000 bytes in 3 pages, 8192 in 2


def test_a_change_that_touches_no_allocation_is_refused_with_the_reason(mixed):
    p = Program()
    p.a.free(p.alloc("fwd", 4096))
    shaper, _, _ = reshaped(p.analysis(), parse_scale("activations=2"), parse_paged_kv("2MiB"))
    assert shaper.refusal(0) == (
        "KV cache in 2.00 MiB pages: device 0's trace holds no allocation of KV cache by fragviz's kind rules and the "
        "recorded stacks, so there is nothing to change (claim your cache's frames with a [kinds] kv_cache pattern "
        "in fragviz.toml, or name its site: --paged-kv FILE.py:LINE=SIZE)")
    shaper, _, _ = reshaped(mixed, parse_scale("nowhere.py:1=2"))
    assert shaper.refusal(3) == ("site 'nowhere.py:1' ×2: device 3's trace holds no allocation of site "
                                 "'nowhere.py:1' by fragviz's kind rules and the recorded stacks, so there is nothing "
                                 "to change")
    assert shaper.touched(0) == (0, 0)


# -- the changed workload simulated ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def served():
    """4 MiB of activations live before the trace, then activations of 2 and 5 MiB, a KV cache of 3 MiB, 1 MiB
    of another kind. Live at the recorded peak: 4 + 2 + 3 + 5 = 14 MiB; then 4 + 3 + 5 + 1."""
    p = Program()
    p.alloc("fwd", 4 * MiB)
    p.a.trace.clear()  # the history switched on now
    x, y, z = p.alloc("fwd", 2 * MiB), p.alloc("kv", 3 * MiB), p.alloc("fwd", 5 * MiB)
    p.a.free(x)
    q = p.alloc("step", 1 * MiB)
    for b in (z, y, q):
        p.a.free(b)
    return p.analysis("served.pickle")


@pytest.mark.parametrize("changes,peak", [
    ([parse_scale("activations=2")], 4 + 4 + 3 + 10),  # the 4 MiB live before the trace is the start, unchanged
    ([parse_paged_kv("2MiB")], 4 + 2 + 4 + 5),  # 3 MiB in two pages of 2 MiB
    ([parse_scale("activations=2"), parse_paged_kv("2MiB")], 4 + 4 + 4 + 10),
    # two sizes (2 and 5 MiB) are no evidence of a length that varies: nothing is padded, and the note says so
    ([parse_bucket("activations:1")], 4 + 2 + 3 + 5),
    ([parse_scale("train.py:update=20")], 4 + 3 + 5 + 20),  # the peak moves to the end
])
def test_the_changed_run_s_peak_requested_is_the_changed_program_s(served, changes, peak):
    (d,) = simulate_device(served, 0, [("changed", DEFAULT)], changes=changes)
    assert d.status == "simulated"
    assert d.recorded.peak_requested_bytes == d.baseline.peak_requested_bytes == 14 * MiB
    assert d.given.peak_requested_bytes == peak * MiB


def test_what_if_json_lists_the_changes_and_what_they_touched(served):
    result = what_if(served, None, None, [parse_scale("activations=2")]).as_dict()
    (d,) = result["devices"]
    assert d["alloc_conf"] is None  # the recorded settings
    assert d["changes"] == [{"change": SCALE, "target": "activations", "factor": 2.0, "steps": None,
                             "page_bytes": None, "label": "activations and temporaries ×2", "allocations": 2,
                             "recorded_bytes": 7 * MiB}]  # the trace's two; not the block live before it
    assert (d["peak_requested_bytes"], d["baseline"]["peak_requested_bytes"]) == (21 * MiB, 14 * MiB)
    conf = "expandable_segments:True"
    (e,) = what_if(served, conf, None, [parse_paged_kv("2MiB")]).as_dict()["devices"]
    assert e["alloc_conf"] == conf and e["settings"]["expandable_segments"] is True
    assert e["changes"][0]["page_bytes"] == 2 * MiB and e["peak_requested_bytes"] == 15 * MiB
    (plain,) = what_if(served, conf).as_dict()["devices"]
    assert "changes" not in plain and plain["alloc_conf"] == conf


def test_what_if_refuses_a_change_that_touches_nothing(served):
    p = Program()
    p.a.free(p.alloc("fwd", 4096))
    analysis = p.analysis("nokv.pickle")
    with pytest.raises(NothingToSimulate) as refused:
        what_if(analysis, None, None, [parse_paged_kv("2MiB")])
    assert str(refused.value).startswith("nokv.pickle: cannot simulate: KV cache in 2.00 MiB pages: device 0's trace "
                                         "holds no allocation of KV cache")
    (d,) = simulate_device(analysis, 0, [("x", DEFAULT)], changes=[parse_scale("nowhere.py:1=2")])
    assert d.status == CANNOT_ANSWER and d.given is None and "nothing to change" in d.reason


def test_a_simulated_snapshot_holds_the_changed_run_and_says_the_changes(served):
    changes = [parse_paged_kv("2MiB")]
    data = simulated_snapshot(served, None, None, changes)
    provenance = next(v for k, v in data.items() if isinstance(v, dict) and v.get("origin") == "simulated")
    assert provenance["changes"] == [f"--paged-kv {2 * MiB}B"]
    allocs = [e["size"] for e in data["device_traces"][0] if e["action"] == "alloc"]
    assert allocs == [2 * MiB, 2 * MiB, 2 * MiB, 5 * MiB, 1 * MiB]  # the 2 MiB activation, two pages, ...


@pytest.mark.parametrize("target, named", [
    ("gpt.py:34", True), ("gpt.py:3", False), ("workloads/gpt.py:34", True), ("gpt.py:attention", True),
    ("gpt.py:forward", False), ("pt.py:34", False), ("mygpt.py:34", False), ("gpt.py", True), ("other.py", False)])
def test_a_site_target_names_a_frame_by_its_file_and_line_or_function(target, named):
    from fragviz.model import Frame
    from fragviz.simulate.reshape import frame_is

    assert frame_is(target, Frame("sample_snapshots/workloads/gpt.py", 34, "attention")) is named


def test_a_request_too_big_for_the_device_is_certain_only_for_the_recorded_workload():
    """A 30 MiB activation alone is larger than a 25 MiB device whatever the settings; halved, it is not."""
    p = Program()
    p.a.free(p.alloc("fwd", 30 * MiB))
    analysis = p.analysis("big.pickle")
    (plain,) = simulate_device(analysis, 0, [("as recorded", DEFAULT)], 25 * MiB)
    assert plain.certain_oom is not None and plain.certain_oom.request_bytes == 30 * MiB
    (halved,) = simulate_device(analysis, 0, [("halved", DEFAULT)], 25 * MiB, changes=[parse_scale("activations=0.5")])
    assert halved.status == "simulated" and halved.certain_oom is None and halved.given.oom_count == 0


def test_a_line_shared_by_layers_of_several_widths_is_no_varying_length():
    # one fixed length, layers of widths 1, 2, 3 and 5 (×4 KiB) taking turns, ten times over: every size shares
    # the unit and reads as lengths 1, 2, 3, 5 at two units, but the "length" changes at every allocation
    p = Program()
    for _ in range(10):
        for width in (1, 2, 3, 5):
            a, b = p.alloc("fwd", width * 4 * KiB), p.alloc("fwd", width * 8 * KiB)
            p.a.free(a)
            p.a.free(b)
    shaper, before, after = reshaped(p.analysis("widths.pickle"), parse_bucket("activations:2"))
    assert alloc_sizes(after) == alloc_sizes(before)  # nothing padded
    assert "found no length family" in shaper.notes()[0]
