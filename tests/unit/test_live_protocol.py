"""What the live agent and its clients agree on: the Prometheus text (read back with the reference parser),
bearer tokens (RFC 6750), loopback addresses, targets and durations."""
from __future__ import annotations

import math

import pytest
from prometheus_client.parser import text_string_to_metric_families

from fragviz.base.errors import UsageError
from fragviz.live import protocol
from fragviz.live.protocol import (AGENT_METRICS, DEVICE_METRICS, STATS_DEVICE_KEYS, bearer_token, is_loopback,
                                   parse_target, render_metrics, target_url, tokens_match)
from fragviz.base.units import parse_duration

MiB = 1024 * 1024


def device(dev: int, **over) -> dict:
    d = {"device": dev, "allocated_bytes": 3 * MiB, "reserved_bytes": 8 * MiB, "active_bytes": 4 * MiB,
         "requested_bytes": 3 * MiB - 100, "inactive_split_bytes": 2 * MiB, "non_releasable_bytes": 2 * MiB,
         "num_alloc_retries": 1, "num_ooms": 2,
         "device_total_bytes": 80 * 1024 * MiB, "device_free_bytes": 80 * 1024 * MiB - 8 * MiB,
         "nvml_used_bytes": None, "largest_free_block": 3 * MiB, "fragmentation": 0.25, "free_scatter": 0.25,
         "processes": [], "peak_reserved_bytes": 9 * MiB, "peak_active_bytes": 5 * MiB,
         "peak_requested_bytes": 4 * MiB, "num_device_alloc": 3, "num_device_free": 1,
         "gpu_uuid": "GPU-8f3c2a1e-0000-4000-8000-000000000001", "gpu_index": 5}
    d.update(over)
    assert set(d) == set(STATS_DEVICE_KEYS)
    return d


def stats(devices: list[dict], rank: int | None = 3, simulated: bool = False) -> dict:
    return {"time": 1700000000.5, "pid": 4242, "simulated": simulated, "rank": rank, "local_rank": rank,
            "world_size": None if rank is None else 4, "devices": devices,
            "agent": {"polls": 7, "cpu_seconds": 0.125, "errors": 1}}


def labels(device: str | None = None, rank: str | None = "3") -> tuple:
    """A sample's labels as sample_values keys them: the job's pid (4242) and rank, and a device's with its GPU."""
    out = {"pid": "4242", **({"rank": rank} if rank is not None else {})}
    if device is not None:
        out.update(device=device, gpu_uuid="GPU-8f3c2a1e-0000-4000-8000-000000000001", gpu_index="5")
    return tuple(sorted(out.items()))


def families(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


def sample_values(text: str) -> dict[tuple[str, tuple], float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


# -- render_metrics ------------------------------------------------------------------------------------

def test_every_family_has_help_and_type_and_the_reference_parser_reads_it_all():
    text = render_metrics(stats([device(0), device(1, reserved_bytes=6 * MiB)]))
    assert text.endswith("\n")
    fams = families(text)
    for _key, name, kind, help_text in DEVICE_METRICS + AGENT_METRICS:
        if name == "fragviz_nvml_used_bytes":
            continue
        family = name[: -len("_total")] if kind == "counter" else name  # the parser names counters without _total
        assert family in fams, name
        assert fams[family].type == kind
        assert fams[family].documentation == help_text
        assert f"# HELP {name} {help_text}\n" in text and f"# TYPE {name} {kind}\n" in text
    assert fams["fragviz_simulated"].type == "gauge"
    assert "fragviz_nvml_used_bytes" not in text  # null on every device: no family at all


def test_device_samples_carry_device_gpu_pid_and_rank_labels_with_the_stats_values():
    text = render_metrics(stats([device(0), device(1, reserved_bytes=6 * MiB, fragmentation=0.5)], rank=3))
    values = sample_values(text)
    assert values[("fragviz_reserved_bytes", labels("0"))] == 8 * MiB
    assert values[("fragviz_reserved_bytes", labels("1"))] == 6 * MiB
    assert values[("fragviz_fragmentation_ratio", labels("1"))] == 0.5
    assert values[("fragviz_requested_bytes", labels("0"))] == 3 * MiB - 100
    assert values[("fragviz_largest_free_block_bytes", labels("0"))] == 3 * MiB
    assert values[("fragviz_non_releasable_bytes", labels("0"))] == 2 * MiB
    assert values[("fragviz_free_scatter_ratio", labels("0"))] == 0.25
    assert values[("fragviz_agent_polls_total", labels())] == 7
    assert values[("fragviz_agent_cpu_seconds_total", labels())] == 0.125
    assert values[("fragviz_agent_errors_total", labels())] == 1
    assert values[("fragviz_simulated", labels())] == 0
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            assert s.labels["rank"] == "3"
            if fam.name.startswith("fragviz_agent") or fam.name == "fragviz_simulated":
                assert set(s.labels) == {"pid", "rank"}
            else:
                assert set(s.labels) == {"device", "gpu_uuid", "gpu_index", "pid", "rank"}


def test_counters_are_named_total_and_typed_counter():
    text = render_metrics(stats([device(0)]))
    counters = [name for _, name, kind, _ in DEVICE_METRICS + AGENT_METRICS if kind == "counter"]
    assert set(counters) == {"fragviz_alloc_retries_total", "fragviz_ooms_total", "fragviz_agent_polls_total",
                             "fragviz_agent_cpu_seconds_total", "fragviz_agent_errors_total",
                             "fragviz_device_allocs_total", "fragviz_device_frees_total"}
    for fam in text_string_to_metric_families(text):
        if fam.type == "counter":
            assert all(s.name == fam.name + "_total" for s in fam.samples), fam.name
        else:
            assert not fam.name.endswith("_total")
    values = sample_values(text)
    assert values[("fragviz_ooms_total", labels("0"))] == 2
    assert values[("fragviz_alloc_retries_total", labels("0"))] == 1
    assert values[("fragviz_device_allocs_total", labels("0"))] == 3
    assert values[("fragviz_peak_reserved_bytes", labels("0"))] == 9 * MiB


def test_nvml_metric_only_for_the_devices_that_have_it():
    text = render_metrics(stats([device(0, nvml_used_bytes=9 * MiB), device(1)]))
    fams = families(text)
    samples = fams["fragviz_nvml_used_bytes"].samples
    assert [(s.labels["device"], s.value) for s in samples] == [("0", 9 * MiB)]


def test_a_job_outside_a_distributed_launch_has_no_rank_and_simulated_shows():
    text = render_metrics(stats([device(0)], rank=None, simulated=True))
    values = sample_values(text)
    assert values[("fragviz_simulated", labels(rank=None))] == 1
    assert values[("fragviz_reserved_bytes", labels("0", rank=None))] == 8 * MiB
    assert "rank=" not in text


def test_a_device_without_a_known_gpu_has_only_its_index_and_nvml_processes_are_their_own_series():
    dev = device(0, gpu_uuid=None, gpu_index=None, processes=[{"pid": 77, "used_bytes": 5 * MiB},
                                                               {"pid": 78, "used_bytes": None}])
    text = render_metrics({**stats([dev]), "process_start_time": 1699999000.25})
    values = sample_values(text)
    assert values[("fragviz_reserved_bytes", (("device", "0"), ("pid", "4242"), ("rank", "3")))] == 8 * MiB
    assert values[("fragviz_nvml_process_used_bytes", (("device", "0"), ("pid", "4242"), ("process_pid", "77"),
                                                       ("rank", "3")))] == 5 * MiB
    assert 'process_pid="78"' not in text
    assert values[("fragviz_process_start_time_seconds", labels())] == 1699999000.25


def test_non_finite_fragmentation_is_written_the_way_prometheus_reads_it():
    values = sample_values(render_metrics(stats([device(0, fragmentation=float("nan"))], rank=0)))
    assert math.isnan(values[("fragviz_fragmentation_ratio", labels("0", rank="0"))])


def test_no_devices_still_gives_the_agent_metrics():
    fams = families(render_metrics(stats([], rank=0)))
    assert "fragviz_reserved_bytes" not in fams
    agent = {"fragviz_agent_polls", "fragviz_agent_cpu_seconds", "fragviz_agent_errors", "fragviz_simulated"}
    assert agent <= set(fams)


def test_the_content_type_is_the_text_exposition_format():
    assert protocol.PROMETHEUS_CONTENT_TYPE.startswith("text/plain; version=0.0.4")


# -- bearer tokens -------------------------------------------------------------------------------------

@pytest.mark.parametrize("header", ["Bearer s3cret", "bearer s3cret", "BEARER s3cret", "bEaReR s3cret",
                                    "Bearer  s3cret"])
def test_the_bearer_scheme_is_case_insensitive(header):
    assert bearer_token(header) == "s3cret"


@pytest.mark.parametrize("token", ["abc-DEF._~+/123", "dG9rZW4=", "dG9rZW4==", "a"])
def test_every_b64token_character_is_accepted(token):
    assert bearer_token(f"Bearer {token}") == token


@pytest.mark.parametrize("header", [None, "", "s3cret", "Bearer", "Bearer ", "Bearers3cret", "Bearer\ts3cret",
                                    "Basic dXNlcjpwYXNz", "Token s3cret", "Bearer s3 cret", "Bearer a=b",
                                    "Bearer s3cret\r\nX-Evil: 1", 'Bearer "s3cret"', "Bearer s3cr\u00e9t",
                                    "Bearer s3cret,other", " Bearer s3cret", "\x00\xff garbage", "Bearer ====",
                                    "Bearer Bearer s3cret"])
def test_anything_but_a_bearer_header_gives_no_token(header):
    assert bearer_token(header) is None


def test_tokens_match_only_the_exact_token():
    assert tokens_match("s3cret", "s3cret")
    assert not tokens_match("s3cre", "s3cret")
    assert not tokens_match("s3cret2", "s3cret")
    assert not tokens_match("S3CRET", "s3cret")
    assert not tokens_match("", "s3cret")
    assert not tokens_match(None, "s3cret")
    assert tokens_match("s\u00e9cret", "s\u00e9cret")  # any text token compares (as UTF-8 bytes)
    assert not tokens_match("secret", "s\u00e9cret")


# -- loopback --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "127.255.255.254", "::1", "[::1]", "localhost",
                                  "LOCALHOST"])
def test_loopback_hosts(host):
    assert is_loopback(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "[::]", "localhost.", "10.0.0.1", "192.168.1.5", "128.0.0.1",
                                  "example.com", "localhost.example.com", "evil-localhost", "127.0.0.1.nip.io",
                                  "", "fe80::1"])
def test_anything_else_is_not_loopback(host):
    assert not is_loopback(host)


# -- targets ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("127.0.0.1:9400", ("127.0.0.1", 9400)),
    ("localhost:1", ("localhost", 1)),
    ("node-7.cluster.local:65535", ("node-7.cluster.local", 65535)),
    ("[::1]:9401", ("::1", 9401)),
    ("[fe80::1]:80", ("fe80::1", 80)),
    ("http://127.0.0.1:9400", ("127.0.0.1", 9400)),
    ("http://127.0.0.1:9400/", ("127.0.0.1", 9400)),
    ("http://[::1]:9400", ("::1", 9400)),
    ("  gpu01:9400  ", ("gpu01", 9400)),
])
def test_parse_target_forms(text, expected):
    assert parse_target(text) == expected


@pytest.mark.parametrize("text", ["", "127.0.0.1", "127.0.0.1:", ":9400", "127.0.0.1:0", "127.0.0.1:65536",
                                  "127.0.0.1:99999", "127.0.0.1:123456", "host:port", "::1:9400", "[::1]",
                                  "[::1]9400", "host name:9400", "host:9400/v1/stats", "host:-1", "[]:9400",
                                  "user@host:9400", "https://127.0.0.1:9400", "ftp://127.0.0.1:9400"])
def test_parse_target_errors_name_the_text(text):
    with pytest.raises(ValueError) as err:
        parse_target(text)
    message = str(err.value)
    assert "\n" not in message
    assert f"'{text.strip()}'" in message


def test_parse_target_errors_say_what_is_expected_or_what_is_wrong():
    with pytest.raises(ValueError, match="HOST:PORT"):
        parse_target("nonsense")
    with pytest.raises(ValueError, match="out of range"):
        parse_target("127.0.0.1:70000")


def test_target_url_brackets_ipv6():
    assert target_url("127.0.0.1", 9400) == "http://127.0.0.1:9400"
    assert target_url("::1", 9400) == "http://[::1]:9400"
    assert target_url(*parse_target("[::1]:9401")) == "http://[::1]:9401"


# -- durations -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, seconds", [("1s", 1.0), ("500ms", 0.5), ("0.2s", 0.2), ("2m", 120.0),
                                           ("1min", 60.0), ("1h", 3600.0), ("0.5", 0.5), ("30", 30.0),
                                           (" 3S ", 3.0), ("1.5 s", 1.5), (".25s", 0.25), ("250MS", 0.25)])
def test_parse_duration(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "0", "0s", "0.0ms", "-1s", "s", "abc", "1d", "1 s s", "1e3s", "1,5s",
                                  "1sec", "inf", "nan"])
def test_parse_duration_errors_are_one_line_usage_errors(text):
    with pytest.raises(UsageError) as err:
        parse_duration(text)
    assert "\n" not in str(err.value) and "duration" in str(err.value)


# -- what a poller accepts as stats ------------------------------------------------------------------------

def _stats(**device):
    dev = {"device": 0, "allocated_bytes": 1, "reserved_bytes": 2, "active_bytes": 1, "requested_bytes": 1,
           "inactive_split_bytes": 0, "non_releasable_bytes": 0, "num_alloc_retries": 0, "num_ooms": 0,
           "device_total_bytes": None, "device_free_bytes": None, "nvml_used_bytes": None, "largest_free_block": 1,
           "fragmentation": 0.0, "free_scatter": 0.0, "processes": []}
    dev.update(device)
    return {"time": 1.0, "pid": 7, "simulated": True, "devices": [dev], "agent": {"polls": 1, "cpu_seconds": 0.0}}


def test_check_stats_accepts_the_agents_object():
    from fragviz.live.protocol import check_stats

    data = _stats()
    assert check_stats(data) is data


def test_an_older_agents_stats_read_with_the_new_figure():
    """An agent from before the figure changed reports inactive_split (the same bytes) and the free scatter as
    fragmentation: the poller records the figure in its new meaning."""
    from fragviz.live.protocol import check_stats

    data = _stats(inactive_split_bytes=1, reserved_bytes=4, fragmentation=0.9)
    for key in ("non_releasable_bytes", "free_scatter"):
        del data["devices"][0][key]
    dev = check_stats(data)["devices"][0]
    assert (dev["non_releasable_bytes"], dev["fragmentation"], dev["free_scatter"]) == (1, 0.25, 0.9)


@pytest.mark.parametrize("bad", [
    [], {"devices": []}, {"time": 1.0, "pid": "7", "devices": []}, {"time": "now", "pid": 7, "devices": []},
    _stats(reserved_bytes="2"), _stats(reserved_bytes=2**63), _stats(reserved_bytes=-1), _stats(allocated_bytes=None),
    _stats(num_ooms=True), _stats(fragmentation="0.5"), _stats(device=None), _stats(largest_free_block=1.5),
    _stats(non_releasable_bytes=None), _stats(free_scatter=None),
])
def test_check_stats_refuses_what_the_store_could_not_hold(bad):
    from fragviz.live.protocol import check_stats

    with pytest.raises(ValueError) as err:
        check_stats(bad)
    assert "not a fragviz agent" in str(err.value)
