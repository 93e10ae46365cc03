"""`fragviz predict` and simulate's code what-ifs as a user runs them: the real command in a subprocess, on the
GPT workload recorded at three batch sizes (tests/data/predict, tests/support/predict_runs.py) and on the bundled
samples. Figures are checked against what each test works out from the recordings' own traces: the run at batch
16 predicted from those at 4 and 8 is the one recorded at 16 (its requests are constant or linear in the batch),
and a scaled, bucketed or paged workload's peak requested bytes are walked through the trace here.
"""
from __future__ import annotations

import gzip
import json
import math
import os
import pickle
import subprocess
import sys

import pytest

from tests.support.helpers import MiB, ROOT
from tests.support.predict_runs import SERIES

FRAGVIZ = [sys.executable, "-m", "fragviz"]
GiB = 1024 * MiB
RUNS = {s.name: s for s in SERIES}
SAMPLES = os.path.join(ROOT, "sample_snapshots")
TRAIN = os.path.join(SAMPLES, "gpt_train.pickle.gz")
PREDICTION_KEYS = {"peak_requested_bytes", "peak_allocated_bytes", "peak_reserved_bytes", "fragmentation", "oom",
                   "laws", "knob", "sizes", "to", "sources", "device", "matched_allocations", "template_allocations",
                   "law_counts", "unmatched", "runs", "peak_requested_range", "peak_reserved_range", "warnings",
                   "ambiguous", "leave_one_out"}
RUN_KEYS = {"alloc_conf", "device_memory_bytes", "peak_requested_bytes", "peak_allocated_bytes",
            "peak_reserved_bytes", "fragmentation", "oom", "oom_count"}
OOM_KEYS = {"event", "site", "requested_bytes", "reserved_bytes", "largest_free_block", "device_memory_bytes"}
CHANGE_KEYS = {"change", "target", "factor", "steps", "page_bytes", "label", "allocations", "recorded_bytes"}


def fragviz(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("FRAGVIZ_DB", "FRAGVIZ_CONFIG")}
    return subprocess.run([*FRAGVIZ, *args], capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)


def as_json(*args: str) -> dict:
    out = fragviz(*args, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def refusal(*args: str) -> str:
    """The one line a refused command prints (exit status 2, nothing on standard output), after predict's
    progress lines ("predict: ...") where it printed any."""
    out = fragviz(*args)
    assert (out.returncode, out.stdout) == (2, ""), out.stdout + out.stderr
    *progress, line = out.stderr.splitlines()
    assert line.startswith("fragviz: ") and all(p.startswith("predict: ") for p in progress), out.stderr
    return line[len("fragviz: "):]


def recording(series: str, value: int) -> str:
    """A recording of tests/data/predict: it must be there (`python -m tests.support.predict_runs` records them)."""
    path = RUNS[series].path(value)
    assert os.path.isfile(path), f"{path} is missing: record it with `python -m tests.support.predict_runs`"
    return path


def trace_of(path: str) -> list[dict]:
    """Device 0's trace, of a run traced from its start: what the trace leaves live is all the end state holds
    (so the walks below, which see only the trace, miss no block)."""
    with gzip.open(path, "rb") as fh:
        data = pickle.load(fh)  # recordings of this repository: plain builtins
    trace = data["device_traces"][0]
    live: dict[int, int] = {}
    for e in trace:
        if e["action"] == "alloc":
            live[e["addr"]] = e["size"]
        elif e["action"] == "free_completed":
            del live[e["addr"]]
    held = sum(b["requested_size"] for s in data["segments"] for b in s["blocks"] if b["state"] != "inactive")
    assert held == sum(live.values()), path
    return trace


def allocs(trace: list[dict]) -> list[dict]:
    return [e for e in trace if e["action"] == "alloc"]


def peak_requested(trace: list[dict], size_of=lambda e: e["size"]) -> int:
    """The most bytes requested and not yet returned (an allocation counts until its free completes), each
    allocation's request being `size_of(event)`."""
    live: dict[int, int] = {}
    now = peak = 0
    for e in trace:
        if e["action"] == "alloc":
            live[e["addr"]] = size_of(e)
            now += live[e["addr"]]
            peak = max(peak, now)
        elif e["action"] == "free_completed":
            now -= live.pop(e["addr"])
    return peak


def peak_reserved(trace: list[dict]) -> int:
    now = peak = 0
    for e in trace:
        if e["action"] == "segment_alloc":
            now += e["size"]
            peak = max(peak, now)
        elif e["action"] == "segment_free":
            now -= e["size"]
    return peak


def at_site(e: dict, target: str) -> bool:
    """Whether a site target (text of one frame, "file.py:LINE" or "file.py:function") names the event's stack."""
    return any(target in f"{f['filename']}:{f['line']}" or target in f"{f['filename']}:{f['name']}"
               for f in e.get("frames", []))


def mib(n: int) -> str:
    return f"{n / MiB:.2f} MiB"


@pytest.fixture(scope="module")
def batch():
    """The training recordings at batch 4, 8 and 16: paths and traces."""
    paths = {v: recording("train_batch", v) for v in (4, 8, 16)}
    return paths, {v: trace_of(p) for v, p in paths.items()}


@pytest.fixture(scope="module")
def predicted_16(batch):
    paths, _ = batch
    return as_json("predict", paths[4], paths[8], "--sizes", "4", "8", "--to", "16")


@pytest.fixture(scope="module")
def fit_1gib(batch):
    paths, _ = batch
    return as_json("predict", paths[4], paths[8], "--sizes", "4", "8", "--fit", "1GiB")


# -- predict ----------------------------------------------------------------------------------------------------

def test_the_run_at_16_predicted_from_4_and_8_is_the_one_recorded_at_16(batch, predicted_16):
    paths, traces = batch
    d = predicted_16
    assert set(d) == PREDICTION_KEYS
    assert d["peak_requested_bytes"] == peak_requested(traces[16])
    assert d["peak_reserved_bytes"] == peak_reserved(traces[16])
    assert (d["knob"], d["sizes"], d["to"], d["sources"], d["device"]) == ("size", [4, 8], 16, [paths[4], paths[8]], 0)
    assert d["oom"] is None  # no device size given
    (run,) = d["runs"]
    assert set(run) == RUN_KEYS | {"peak_requested_range", "peak_reserved_range"} and run["alloc_conf"] is None and run["device_memory_bytes"] is None
    assert [run[k] for k in ("peak_requested_bytes", "peak_allocated_bytes", "peak_reserved_bytes", "fragmentation",
                             "oom")] == [d[k] for k in ("peak_requested_bytes", "peak_allocated_bytes",
                                                        "peak_reserved_bytes", "fragmentation", "oom")]
    # every allocation of the template (the run at 8) matched, each site's bytes as recorded and as at 16
    n = len(allocs(traces[8]))
    assert d["matched_allocations"] == d["template_allocations"] == n == len(allocs(traces[4]))
    assert d["unmatched"] == {"allocations": 0, "bytes": 0, "share": 0.0, "sites": []}
    assert sum(d["law_counts"].values()) == n and set(d["law_counts"]) == {"constant", "linear", "quadratic", "power"}
    laws = d["laws"].values()
    assert all(set(s) == {"law", "allocations", "by_law", "recorded_bytes", "predicted_bytes"} for s in laws)
    assert sum(s["allocations"] for s in laws) == n
    for v in (4, 8):
        assert sum(s["recorded_bytes"][str(v)] for s in laws) == sum(e["size"] for e in allocs(traces[v]))
    assert sum(s["predicted_bytes"] for s in laws) == sum(e["size"] for e in allocs(traces[16]))
    assert [s["predicted_bytes"] for s in laws] == sorted((s["predicted_bytes"] for s in laws), reverse=True)


def test_a_third_recording_continues_the_recorded_peaks(batch):
    paths, traces = batch
    d = as_json("predict", paths[4], paths[8], paths[16], "--sizes", "4", "8", "16", "--to", "32")
    assert set(d) == PREDICTION_KEYS and d["sizes"] == [4, 8, 16]
    assert d["template_allocations"] == len(allocs(traces[16]))  # the nearest 32
    assert set(d["laws"][next(iter(d["laws"]))]["recorded_bytes"]) == {"4", "8", "16"}
    # the recorded peaks grow by the same bytes per sample: 4 → 8 → 16 → 32 continues the line
    p8, p16 = peak_requested(traces[8]), peak_requested(traces[16])
    assert d["peak_requested_bytes"] == p16 + 2 * (p16 - p8)


def test_the_prediction_as_text(batch):
    paths, traces = batch
    out = fragviz("predict", paths[4], paths[8], "--sizes", "4", "8", "--to", "16", "--knob", "batch")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    n = len(allocs(traces[8]))
    assert lines[0] == f"predicted at batch 16 from the runs at batch 4, 8 ({paths[4]}, {paths[8]}), device 0"
    assert lines[1].startswith(f"  matched {n} of {n} allocations; laws: ")
    assert lines[2] == "  every allocation matched between the recordings"
    assert lines[3].startswith(f"  under the recorded settings: peak requested {mib(peak_requested(traces[16]))}, ")
    assert lines[4] == ("    device size not given (--device-memory SIZE): whether it runs out of memory is not "
                        "asked")
    assert lines[5] == "  sites by predicted bytes (allocated over the run):"
    assert len(lines) == 6 + 8  # the eight sites of most bytes


def test_fit_finds_the_largest_batch_and_the_prediction_there_agrees(batch, fit_1gib):
    paths, traces = batch
    assert set(fit_1gib) == {"fit"}
    (answer,) = fit_1gib["fit"]
    assert set(answer) == {"alloc_conf", "device_memory_bytes", "largest_fitting", "first_failing", "at_largest",
                           "at_first_failing", "largest_fitting_point", "first_failing_point"}
    largest = answer["largest_fitting"]
    assert peak_reserved(traces[16]) < GiB and largest >= 16  # the run recorded at 16 fits 1 GiB
    assert (answer["alloc_conf"], answer["device_memory_bytes"], answer["first_failing"]) == (None, GiB, largest + 1)
    at, failing = answer["at_largest"], answer["at_first_failing"]
    assert set(at) == set(failing) == RUN_KEYS
    assert at["oom"] is False and at["peak_reserved_bytes"] <= GiB
    assert set(failing["oom"]) == OOM_KEYS and failing["oom"]["device_memory_bytes"] == GiB
    # predicting at the first failing size on that device says the same OOM
    d = as_json("predict", paths[4], paths[8], "--sizes", "4", "8", "--to", str(largest + 1), "--device-memory",
                "1GiB")
    assert d["oom"] == failing["oom"] and d["runs"][0]["device_memory_bytes"] == GiB
    oom = d["oom"]
    assert set(oom) == OOM_KEYS and oom["reserved_bytes"] <= GiB
    # the event is the template's (the run at 8) request, from the site named
    e = traces[8][oom["event"]]
    assert e["action"] == "alloc"
    assert oom["site"] in {f"{f['filename']}:{f['line']} {f['name']}" for f in e["frames"]}


def test_fit_as_text_beside_the_prediction_at_the_largest(batch, fit_1gib):
    paths, _ = batch
    (answer,) = fit_1gib["fit"]
    largest = answer["largest_fitting"]
    out = fragviz("predict", paths[4], paths[8], "--sizes", "4", "8", "--to", str(largest), "--device-memory", "1GiB",
                  "--fit", "1GiB", "--knob", "batch")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "    fits a device of 1.00 GiB: no OOM" in lines
    oom = answer["at_first_failing"]["oom"]
    assert lines[-1] == (f"under the recorded settings: the largest batch that fits 1.00 GiB is {largest} (peak "
                         f"reserved {mib(answer['at_largest']['peak_reserved_bytes'])}); at {largest + 1} it runs out "
                         f"of memory: {mib(oom['requested_bytes'])} at {oom['site']}")
    steps = [line for line in out.stderr.splitlines() if line.startswith("predict: the recorded settings: ")]
    assert steps[0] == "predict: the recorded settings: 8 fits"  # from the largest recording, doubling
    assert steps[-1] in {f"predict: the recorded settings: {largest} fits",
                         f"predict: the recorded settings: {largest + 1} runs out of memory"}
    assert f"predict: the recorded settings: {largest + 1} runs out of memory" in steps


@pytest.mark.parametrize("args,message", [
    (["--sizes", "4", "--to", "16"], "--sizes gives 1 sizes for 2 recordings: give one per recording, in their order"),
    (["--sizes", "4", "4", "--to", "16"], "--sizes: each recording must be at a different size"),
    (["--sizes", "4", "8"], "predict needs --to SIZE (the size to predict) or --fit MEMORY (the largest size that "
                            "fits)"),
    (["--sizes", "4", "8", "--to", "inf"], "--sizes and --to must be finite numbers above 0"),
    (["--sizes", "4", "8", "--to", "0"], "--sizes and --to must be finite numbers above 0"),
])
def test_arguments_that_do_not_fit_are_refused_in_one_line(batch, args, message):
    paths, _ = batch
    assert refusal("predict", paths[4], paths[8], *args) == message


def test_a_missing_recording_is_refused(batch):
    paths, _ = batch
    missing = os.path.join(ROOT, "tests", "data", "predict", "no_such_run.pickle.gz")
    assert refusal("predict", paths[4], missing, "--sizes", "4", "8", "--to", "16") == (
        f"{missing}: no such file, and not a snapshot id")


def test_a_training_and_an_inference_recording_are_not_one_program(batch):
    paths, _ = batch
    infer = recording("infer_batch", 4)
    line = refusal("predict", paths[8], infer, "--sizes", "1", "2", "--to", "4")
    assert line.startswith(f"{paths[8]}, {infer}: cannot predict: ")
    assert ("do not match between the recordings, more than the 10% allowed: they do not look like one program at "
            "two sizes (largest: ") in line
    share = float(line.split("cannot predict: ", 1)[1].split("%", 1)[0])
    assert share > 10


def test_a_recording_that_ran_out_of_memory_is_refused(batch):
    paths, _ = batch
    oom_sample = os.path.join(SAMPLES, "gpt_train_fragmentation_oom.pickle.gz")
    first = [i for i, e in enumerate(trace_of(oom_sample)) if e["action"] == "oom"][0]
    assert refusal("predict", paths[4], oom_sample, "--sizes", "4", "8", "--to", "16") == (
        f"{oom_sample}: the run ran out of memory at event {first}, so the recording holds only part of the program: "
        "record a run that completes")


# -- simulate's code what-ifs -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def train_trace():
    return trace_of(TRAIN)


def simulated(*args: str) -> dict:
    (d,) = as_json("simulate", *args)["devices"]
    assert d["status"] == "simulated" and set(d["changes"][0]) == CHANGE_KEYS
    return d


def test_scale_of_a_site_against_the_trace(train_trace):
    d = simulated(TRAIN, "--scale", "gpt.py:45=2")
    chosen = [e for e in allocs(train_trace) if at_site(e, "gpt.py:45")]
    assert d["changes"] == [{"change": "scale", "target": "gpt.py:45", "factor": 2.0, "steps": None, "page_bytes": None,
                             "label": "site 'gpt.py:45' ×2", "allocations": len(chosen),
                             "recorded_bytes": sum(e["size"] for e in chosen)}]
    assert d["alloc_conf"] is None
    assert d["recorded"]["peak_requested_bytes"] == d["baseline"]["peak_requested_bytes"] == peak_requested(
        train_trace)
    assert d["peak_requested_bytes"] == peak_requested(
        train_trace, lambda e: math.ceil(e["size"] * 2) if at_site(e, "gpt.py:45") else e["size"])


def test_bucket_pads_the_site_s_lengths_against_the_trace(train_trace):
    """The site's sizes that follow a length (the sample holds 4 lengths, 261 to 496) pad up to their bucket: every
    allocation at the site is counted, with those of other sites and the backward's of the same families; the
    sizes only grow, so the peak requested does not fall."""
    d = simulated(TRAIN, "--bucket", "gpt.py:forward:4", "--alloc-conf", "expandable_segments:True")
    assert d["alloc_conf"] == "expandable_segments:True" and d["settings"]["expandable_segments"] is True
    (change,) = d["changes"]
    at_forward = [e for e in allocs(train_trace) if at_site(e, "gpt.py:forward")]
    assert change["steps"] == 4 and change["allocations"] > len(at_forward)
    assert d["peak_requested_bytes"] >= peak_requested(train_trace)
    (note,) = d["change_notes"]
    assert "pads lengths, not bytes: 4 lengths seen" in note


def test_paged_kv_of_the_cache_s_site_against_the_trace():
    infer = recording("infer_batch", 4)
    trace, page = trace_of(infer), 256 * 1024
    d = simulated(infer, "--paged-kv", "gpt.py:34=256KiB")
    chosen = [e for e in allocs(trace) if at_site(e, "gpt.py:34")]  # torch.cat of the cache and the new keys
    assert len(chosen) == 2 * 2 * 4 * 16  # keys and values, 2 requests, 4 layers, 16 new tokens
    assert d["changes"] == [{"change": "paged_kv", "target": "gpt.py:34", "factor": None, "steps": None,
                             "page_bytes": page, "label": "site 'gpt.py:34' in 256.00 KiB pages",
                             "allocations": len(chosen), "recorded_bytes": sum(e["size"] for e in chosen)}]
    # each cache made by torch.cat takes over the pages of the one it replaces (freed before the next allocation)
    # and makes only the extra pages, so the peak lies between the recorded one and the peak with every cache in
    # pages of its own (test_whatif_programs checks the figure against a program that really pages its cache)
    own_pages = peak_requested(trace, lambda e: -(-e["size"] // page) * page if at_site(e, "gpt.py:34") else e["size"])
    assert d["baseline"]["peak_requested_bytes"] == peak_requested(trace)
    assert peak_requested(trace) < d["peak_requested_bytes"] <= own_pages


def test_paged_kv_of_a_kind_the_stacks_do_not_show_is_refused_with_the_reason():
    infer = recording("infer_batch", 4)  # the cache is a list of tensors in gpt.py: no frame says "cache"
    assert refusal("simulate", infer, "--paged-kv", "256KiB", "--json") == (
        f"{infer}: cannot simulate: KV cache in 256.00 KiB pages: device 0's trace holds no allocation of KV cache by "
        "fragviz's kind rules and the recorded stacks, so there is nothing to change (claim your cache's frames "
        "with a [kinds] kv_cache pattern in fragviz.toml, or name its site: --paged-kv FILE.py:LINE=SIZE)")


def test_a_site_no_frame_names_is_refused():
    assert refusal("simulate", TRAIN, "--scale", "nowhere.py:1=2") == (
        f"{TRAIN}: cannot simulate: site 'nowhere.py:1' ×2: device 0's trace holds no allocation of site "
        "'nowhere.py:1' by fragviz's kind rules and the recorded stacks, so there is nothing to change")


def test_a_bad_code_change_is_refused_before_the_file_is_read():
    missing = os.path.join(SAMPLES, "no_such.pickle.gz")
    assert refusal("simulate", missing, "--bucket", "activations:0") == (
        "--bucket 'activations:0': write TARGET:K (a kind or a site, then 1 to 1048576 length buckets), e.g. "
        "activations:8")
