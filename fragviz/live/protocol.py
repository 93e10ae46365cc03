"""What the live agent and its clients agree on: paths, the stats object, Prometheus names, tokens, targets.

Standard library only: the agent runs inside someone's training job, and the poller and dashboard read the
same definitions.

    GET /v1/stats                 one JSON object (STATS_DEVICE_KEYS per device; see agent.Agent.stats)
    GET /v1/snapshot?trace=0|1    the current snapshot in PyTorch's own format (a protocol-4 pickle)
    GET /v1/oom                   the snapshot captured at the last OOM; 404 before any OOM
    GET /v1/state                 the current segments and blocks as compact JSON (no frames), for live pages
    GET /metrics                  the stats in the Prometheus text exposition format (version 0.0.4)
"""
from __future__ import annotations

import hmac
import ipaddress
import math
import re
from typing import Any

PATH_STATS = "/v1/stats"
PATH_SNAPSHOT = "/v1/snapshot"
PATH_OOM = "/v1/oom"
PATH_STATE = "/v1/state"
PATH_METRICS = "/metrics"
PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
DEFAULT_RUN_PORT = 9400

STATS_DEVICE_KEYS = ("device", "allocated_bytes", "reserved_bytes", "active_bytes", "requested_bytes",
                     "inactive_split_bytes", "non_releasable_bytes", "num_alloc_retries", "num_ooms",
                     "device_total_bytes", "device_free_bytes", "nvml_used_bytes", "largest_free_block",
                     "fragmentation", "free_scatter", "processes", "peak_reserved_bytes", "peak_active_bytes",
                     "peak_requested_bytes", "num_device_alloc", "num_device_free", "gpu_uuid", "gpu_index")
# Since the fleet's metrics: peaks since the job started, driver allocations and frees, and the GPU by UUID and
# physical index (to join DCGM's series). An agent from before them lacks them: read as unknown (null).
LATER_DEVICE_KEYS = ("peak_reserved_bytes", "peak_active_bytes", "peak_requested_bytes", "num_device_alloc",
                     "num_device_free", "gpu_index")
OPTIONAL_DEVICE_KEYS = ("device_total_bytes", "device_free_bytes", "nvml_used_bytes") + LATER_DEVICE_KEYS
RATIO_KEYS = ("fragmentation", "free_scatter")
# What a client reads of an agent's answers: a real job's stats take a few KB, its state a few MB (a block
# is some 40 bytes of JSON). Parsed JSON takes up to ~30x its text, so these also bound the reader's memory.
MAX_STATS_BYTES = 256 << 10
MAX_STATE_BYTES = 16 << 20
MAX_DEVICES = 64  # per stats object: more GPUs than any one process drives
BLOCK_STATES = ("active_allocated", "active_pending_free", "inactive")
POOLS = ("large", "small")
COUNT_KEYS = tuple(k for k in STATS_DEVICE_KEYS if k not in ("device", "processes", "gpu_uuid") + RATIO_KEYS)

# (stats key, metric name, type, help). Counters end in _total, as the exposition format asks.
DEVICE_METRICS = (
    ("allocated_bytes", "fragviz_allocated_bytes", "gauge", "Bytes in blocks allocated to tensors"),
    ("reserved_bytes", "fragviz_reserved_bytes", "gauge", "Bytes reserved from the driver by PyTorch's caching allocator"),
    ("active_bytes", "fragviz_active_bytes", "gauge", "Bytes in active blocks (allocated or waiting to be freed)"),
    ("requested_bytes", "fragviz_requested_bytes", "gauge", "Bytes the program asked for (before rounding)"),
    ("inactive_split_bytes", "fragviz_inactive_split_bytes", "gauge",
     "Cached free bytes in split blocks, as memory_stats() counts them (expandable segments excluded)"),
    ("non_releasable_bytes", "fragviz_non_releasable_bytes", "gauge",
     "Cached free bytes that empty_cache() could not give back: stuck between live blocks"),
    ("num_alloc_retries", "fragviz_alloc_retries_total", "counter",
     "Device allocations retried after freeing the cache"),
    ("num_ooms", "fragviz_ooms_total", "counter", "Out-of-memory errors raised by the allocator"),
    ("device_total_bytes", "fragviz_device_total_bytes", "gauge", "Memory of the device"),
    ("device_free_bytes", "fragviz_device_free_bytes", "gauge", "Memory of the device not in use by anyone"),
    ("nvml_used_bytes", "fragviz_nvml_used_bytes", "gauge",
     "Device memory in use as NVML sees it (all processes, CUDA contexts included)"),
    ("largest_free_block", "fragviz_largest_free_block_bytes", "gauge",
     "Largest cached free block: the largest request the cache can serve without the driver"),
    ("fragmentation", "fragviz_fragmentation_ratio", "gauge",
     "Non-releasable bytes / reserved bytes (0: every cached free byte could be given back)"),
    ("free_scatter", "fragviz_free_scatter_ratio", "gauge",
     "1 - largest free block / cached free bytes, whole free segments included (secondary)"),
    ("peak_reserved_bytes", "fragviz_peak_reserved_bytes", "gauge",
     "Highest reserved bytes since the job started (a scrape misses what happens between two)"),
    ("peak_active_bytes", "fragviz_peak_active_bytes", "gauge", "Highest active bytes since the job started"),
    ("peak_requested_bytes", "fragviz_peak_requested_bytes", "gauge",
     "Highest requested bytes since the job started"),
    ("num_device_alloc", "fragviz_device_allocs_total", "counter",
     "Memory the allocator took from the driver (cudaMalloc, or an expandable segment's mapping)"),
    ("num_device_free", "fragviz_device_frees_total", "counter", "Memory the allocator gave back to the driver"),
)
# Rendered apart from the tables above (their labels differ): the job's own, and NVML's per process
JOB_METRICS = ("fragviz_simulated", "fragviz_process_start_time_seconds", "fragviz_nvml_process_used_bytes")
AGENT_METRICS = (
    ("polls", "fragviz_agent_polls_total", "counter", "Statistics collections served by the agent"),
    ("cpu_seconds", "fragviz_agent_cpu_seconds_total", "counter", "CPU time spent by the agent's threads"),
    ("errors", "fragviz_agent_errors_total", "counter", "Requests the agent failed to serve"),
)


def check_stats(data: Any) -> dict[str, Any]:
    """`data` if it is a stats object whose figures fit the store (ints in 0..2**63-1), else ValueError. The
    devices of an agent from before non_releasable_bytes are given the figures in their current meaning.

    A poller may be pointed at anything listening on a port: it records only what has this shape."""
    if not isinstance(data, dict) or not isinstance(data.get("devices"), list):
        raise ValueError("not a fragviz agent: no stats object")
    if not _is_int(data.get("pid")) or not _is_time(data.get("time")):
        raise ValueError("not a fragviz agent: the stats object has no pid or time")
    if len(data["devices"]) > MAX_DEVICES:
        raise ValueError(f"{len(data['devices']):,} devices in one stats object (at most {MAX_DEVICES} are recorded)")
    if data.get("rank") is not None and not _is_int(data["rank"]):
        raise ValueError("not a fragviz agent: rank is not a count")
    for dev in data["devices"]:
        if not isinstance(dev, dict) or not _is_int(dev.get("device")):
            raise ValueError("not a fragviz agent: a device without its index")
        if "non_releasable_bytes" not in dev:
            _from_an_older_agent(dev)
        for key in LATER_DEVICE_KEYS + ("gpu_uuid",):
            dev.setdefault(key, None)
        if dev["gpu_uuid"] is not None and not (isinstance(dev["gpu_uuid"], str) and _UUID.fullmatch(dev["gpu_uuid"])):
            raise ValueError("not a fragviz agent: gpu_uuid is not a GPU's UUID")
        for key in COUNT_KEYS:
            if not _is_int(dev.get(key)) and not (key in OPTIONAL_DEVICE_KEYS and dev.get(key) is None):
                raise ValueError(f"not a fragviz agent: {key} is not a count")
        for key in RATIO_KEYS:
            if not _is_ratio(dev.get(key)):
                raise ValueError(f"not a fragviz agent: {key} is not a ratio between 0 and 1")
    return data


def check_state(data: Any) -> dict[str, Any]:
    """`data` if it is a state object (time and compact segments, as `compact_segment` writes them) whose
    figures fit the store, else ValueError."""
    if not isinstance(data, dict) or not _is_time(data.get("time")) or not isinstance(data.get("segments"), list):
        raise ValueError("not a fragviz agent: no state object")
    for seg in data["segments"]:
        if not isinstance(seg, dict) or not all(_is_int(seg.get(k)) for k in ("device", "address", "total_size")):
            raise ValueError("not a fragviz agent: a segment without its device, address or size")
        if not _is_int(seg.get("stream", 0)) or seg.get("pool", "large") not in POOLS:
            raise ValueError("not a fragviz agent: a segment's stream or pool is not one")
        pool_id = seg.get("pool_id")
        if pool_id is not None and not (isinstance(pool_id, list) and len(pool_id) == 2 and all(map(_is_int, pool_id))):
            raise ValueError("not a fragviz agent: a segment's pool id is not a pair of counts")
        blocks = seg.get("blocks")
        if not isinstance(blocks, list) or not all(_is_block(b) for b in blocks):
            raise ValueError("not a fragviz agent: a segment's blocks are not [address, size, requested, state]")
    return data


_UUID = re.compile(r"(GPU|MIG)-[0-9A-Za-z-]{1,64}")


def _is_block(b: Any) -> bool:
    return isinstance(b, list) and len(b) == 4 and all(map(_is_int, b[:3])) and b[3] in BLOCK_STATES


def _is_time(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0


def _is_ratio(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 1


def _from_an_older_agent(dev: dict[str, Any]) -> None:
    """An agent from before fragmentation meant non-releasable / reserved bytes: its inactive split is that
    figure (memory_stats() counts it so), and what it called fragmentation is the free scatter."""
    stuck, reserved = dev.get("inactive_split_bytes"), dev.get("reserved_bytes")
    if _is_int(stuck) and _is_int(reserved):
        dev["free_scatter"] = dev.get("fragmentation")
        dev["non_releasable_bytes"] = stuck
        dev["fragmentation"] = stuck / reserved if reserved else 0.0


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63


def render_metrics(stats: dict[str, Any]) -> str:
    """The stats object as Prometheus text: HELP and TYPE lines, a sample per device. Every sample is labelled
    with the job's `pid`, and `rank` where the job has one (a job outside a distributed launch has none); a
    device's samples with `device` (CUDA's index in the job), and where known `gpu_uuid` and `gpu_index` (the
    physical index), which join DCGM's series (`DCGM_FI_DEV_FB_USED{UUID=...}`)."""
    job = _job_labels(stats)
    lines = ["# HELP fragviz_simulated 1 when the device is fragviz's simulation of a CUDA device (a CPU run)",
             "# TYPE fragviz_simulated gauge", f"fragviz_simulated{{{job}}} {int(bool(stats.get('simulated')))}"]
    if stats.get("process_start_time") is not None:
        lines += ["# HELP fragviz_process_start_time_seconds When the job's process started (Unix time)",
                  "# TYPE fragviz_process_start_time_seconds gauge",
                  f"fragviz_process_start_time_seconds{{{job}}} {_number(stats['process_start_time'])}"]
    for key, name, kind, help_text in DEVICE_METRICS:
        samples = [(d, d.get(key)) for d in stats["devices"] if d.get(key) is not None]
        if not samples:
            continue
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        lines += [f"{name}{{{_device_labels(d)},{job}}} {_number(v)}" for d, v in samples]
    processes = [(d, p) for d in stats["devices"] for p in d.get("processes") or () if p.get("used_bytes") is not None]
    if processes:
        lines += ["# HELP fragviz_nvml_process_used_bytes Device memory each process uses, as NVML sees it",
                  "# TYPE fragviz_nvml_process_used_bytes gauge"]
        lines += [f'fragviz_nvml_process_used_bytes{{{_device_labels(d)},{job},process_pid="{int(p["pid"])}"}} '
                  f'{_number(p["used_bytes"])}' for d, p in processes]
    for key, name, kind, help_text in AGENT_METRICS:
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}",
                  f"{name}{{{job}}} {_number(stats['agent'].get(key, 0))}"]
    return "\n".join(lines) + "\n"


def _job_labels(stats: dict[str, Any]) -> str:
    rank = stats.get("rank")
    return f'pid="{int(stats["pid"])}"' + (f',rank="{int(rank)}"' if rank is not None else "")


def _device_labels(dev: dict[str, Any]) -> str:
    out = f'device="{int(dev["device"])}"'
    if dev.get("gpu_uuid"):
        out += f',gpu_uuid="{dev["gpu_uuid"]}"'  # checked against _UUID: no quote or backslash can be in it
    if dev.get("gpu_index") is not None:
        out += f',gpu_index="{int(dev["gpu_index"])}"'
    return out


def _number(value: Any) -> str:
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else ("NaN" if math.isnan(value) else
                                                         ("+Inf" if value > 0 else "-Inf"))
    return str(int(value))


_TOKEN68 = r"[A-Za-z0-9\-._~+/]+=*"


def bearer_token(header: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header (RFC 6750: the scheme is case-insensitive)."""
    if not header:
        return None
    m = re.fullmatch(rf"[Bb][Ee][Aa][Rr][Ee][Rr] +({_TOKEN68}) *", header)
    return m.group(1) if m else None


def fits_bearer(token: str) -> bool:
    """Whether `token` can be sent as `Authorization: Bearer <token>` (RFC 6750's b64token)."""
    return re.fullmatch(_TOKEN68, token) is not None


def tokens_match(given: str | None, expected: str) -> bool:
    """Constant-time comparison: how long it takes says nothing about how much of the token was right."""
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())


def is_loopback(host: str) -> bool:
    """True only for addresses no other machine can reach: 127.0.0.0/8, ::1 and the name `localhost`."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_host(host: str, token: str | None) -> None:
    """Binding to anything but loopback needs a token (AgentError before anything starts)."""
    if not names_this_machine(host) and not token:
        from fragviz.base.errors import AgentError

        raise AgentError(f"refusing to serve the live agent on {host} without a token: other machines could "
                         "read this job's memory (pass token=..., or --token / FRAGVIZ_TOKEN)")


def names_this_machine(host: str) -> bool:
    """is_loopback, or `localhost.` (the same name, fully qualified): the names and addresses a server that
    only this machine may reach can be bound to and called by (in a Host header)."""
    return is_loopback(host) or host.lower() == "localhost."


def bind_address(host: str) -> str:
    """The address to bind for `host`: `localhost.` is bound as `localhost` (not every resolver knows the
    fully qualified form)."""
    return host[:-1] if host.lower() == "localhost." else host


_HOST_HEADER = re.compile(r"\[([0-9A-Fa-f:.]+)\](?::(\d{1,5}))?|([A-Za-z0-9.\-_~]+)(?::(\d{1,5}))?")


def split_host_header(value: str) -> tuple[str, int | None] | None:
    """(host, port or None) of a Host header value (RFC 9110: uri-host [ ":" port ]); None if it is not one,
    so `localhost.evil.example`, `127.0.0.1.nip.io` and `localhost@evil` stay what they are or are refused."""
    m = _HOST_HEADER.fullmatch(value.strip())
    if not m:
        return None
    host, port = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
    if port is not None and not 0 < int(port) < 65536:
        return None
    return host, int(port) if port is not None else None


def parse_target(text: str) -> tuple[str, int]:
    """'HOST:PORT', '[::1]:PORT' or 'http://HOST:PORT' -> (host, port)."""
    raw = text.strip()
    scheme, sep, rest = raw.partition("://")
    if sep and scheme.lower() != "http":
        raise ValueError(f"'{raw[:80]}': the agent speaks plain HTTP (use http:// or just HOST:PORT)")
    body = rest if sep else raw
    body = body.rstrip("/")
    m = re.fullmatch(r"\[([0-9A-Fa-f:.]+)\]:(\d{1,5})|([A-Za-z0-9.\-]+):(\d{1,5})", body)
    if not m:
        raise ValueError(f"'{raw[:80]}' is not HOST:PORT (for example 127.0.0.1:9400)")
    host, port = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
    if not 0 < int(port) < 65536:
        raise ValueError(f"'{raw[:80]}': port {port} is out of range")
    return host, int(port)


def target_url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

