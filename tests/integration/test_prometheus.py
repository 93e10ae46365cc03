"""A real Prometheus server (Debian's /usr/bin/prometheus) scraping live agents: the value it stores is the
agent's own figure, and a token-protected agent is scraped with `authorization: credentials`."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Callable

import pytest

from tests.support import helpers
from tests.support.helpers import TESTS, free_port

PROMETHEUS = "/usr/bin/prometheus"
BIN = os.path.dirname(sys.executable)
FRAGVIZ = os.path.join(BIN, "fragviz")
TRAIN_LOOP = os.path.join(TESTS, "live", "train_loop.py")
DEADLINE = 90.0  # a bound on each wait, never a measurement
TOKEN = "prom-s3cret"


def get(url: str, token: str | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(url)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def wait_for(condition: Callable[[], Any], what: str, procs: list[subprocess.Popen], logs: list[str]) -> Any:
    """helpers.wait_for, failing at once when one of `procs` exits, with the end of each log."""
    def gone() -> str | None:
        dead = [p for p in procs if p.poll() is not None]
        return f"{dead[0].args[0]} exited ({dead[0].returncode})" if dead else None

    def tails() -> str:
        return "".join(f"\n--- {log}:\n{open(log, errors='replace').read()[-3000:]}" for log in logs)

    return helpers.wait_for(condition, what, deadline=DEADLINE, interval=0.2, gone=gone, tail=tails)


def job(port: int, tmp, name: str, *run_args: str) -> tuple[subprocess.Popen, str]:
    log = str(tmp / f"{name}.log")
    env = {k: v for k, v in os.environ.items() if k not in ("FRAGVIZ_TOKEN", "RANK", "LOCAL_RANK", "WORLD_SIZE")}
    with open(log, "wb") as fh:
        proc = subprocess.Popen([FRAGVIZ, "run", "--port", str(port), "--device-memory", "256MiB", *run_args, "--",
                                 sys.executable, TRAIN_LOOP, "--hold"], stdout=fh, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env)
    return proc, log


def holding(log: str) -> bool:
    with open(log, errors="replace") as fh:
        return "holding" in fh.read()


def query(prom: int, promql: str) -> list[dict[str, Any]]:
    try:
        status, body = get(f"http://127.0.0.1:{prom}/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
    except OSError:
        return []  # not listening yet
    if status != 200:
        return []
    data = json.loads(body)
    assert data["status"] == "success", data
    return data["data"]["result"]


def scraped_after(prom: int, selector: str, t0: float) -> list[tuple[dict[str, str], float]]:
    """(labels, value) of every sample of `selector` that Prometheus scraped after the time t0."""
    return [(series["metric"], float(v)) for series in query(prom, f"{selector}[60s]")
            for ts, v in series["values"] if ts > t0]


def test_prometheus_scrapes_the_agent_and_stores_its_figures(tmp_path):
    if not os.access(PROMETHEUS, os.X_OK):
        pytest.fail(f"{PROMETHEUS} is missing: apt-get install prometheus (scripts/test.sh does it)")
    open_port, token_port, prom_port = free_port(), free_port(), free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(f"""
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: fragviz
    static_configs:
      - targets: ["127.0.0.1:{open_port}"]
  - job_name: fragviz-token
    authorization:
      credentials: {TOKEN}
    static_configs:
      - targets: ["127.0.0.1:{token_port}"]
  - job_name: fragviz-wrong-token
    authorization:
      credentials: not-{TOKEN}
    static_configs:
      - targets: ["127.0.0.1:{token_port}"]
""")
    procs: list[subprocess.Popen] = []
    logs: list[str] = []
    try:
        for port, name, args in ((open_port, "open", ()), (token_port, "token", ("--token", TOKEN))):
            proc, log = job(port, tmp_path, name, *args)
            procs.append(proc)
            logs.append(log)
        prom_log = str(tmp_path / "prometheus.log")
        logs.append(prom_log)
        with open(prom_log, "wb") as fh:
            procs.append(subprocess.Popen([PROMETHEUS, f"--config.file={config}",
                                           f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                           f"--web.listen-address=127.0.0.1:{prom_port}"],
                                          stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
        wait_for(lambda: all(holding(log) for log in logs[:2]), "both jobs to hold their tensors", procs, logs)
        static_since = time.time()  # from here on both jobs' figures no longer change

        samples = wait_for(lambda: scraped_after(prom_port, 'fragviz_reserved_bytes{job="fragviz"}', static_since),
                           "Prometheus to scrape fragviz_reserved_bytes from the static job", procs, logs)
        status, body = get(f"http://127.0.0.1:{open_port}/v1/stats")
        assert status == 200
        stats = json.loads(body)
        for labels, value in samples:
            assert labels["device"] == "0" and labels["pid"] == str(stats["pid"]) and "rank" not in labels
            assert labels["instance"] == f"127.0.0.1:{open_port}"
            assert value == stats["devices"][0]["reserved_bytes"]  # a static job: they agree
        (series,) = query(prom_port, 'fragviz_reserved_bytes{job="fragviz"}')  # the instant query, as a user asks
        assert float(series["value"][1]) == stats["devices"][0]["reserved_bytes"]
        allocated = scraped_after(prom_port, 'fragviz_allocated_bytes{job="fragviz"}', static_since)
        assert allocated and {v for _, v in allocated} == {stats["devices"][0]["allocated_bytes"]}
        assert stats["devices"][0]["allocated_bytes"] >= 8 << 20
        (simulated,) = query(prom_port, 'fragviz_simulated{job="fragviz"}')
        assert simulated["value"][1] == "1"

        (up,) = wait_for(lambda: query(prom_port, 'up{job="fragviz-token"}'), "a scrape of the token agent",
                         procs, logs)
        assert up["value"][1] == "1", "Prometheus with the right credentials is let in"
        reserved = wait_for(lambda: scraped_after(prom_port, 'fragviz_reserved_bytes{job="fragviz-token"}',
                                                  static_since), "the token agent's figures", procs, logs)
        status, body = get(f"http://127.0.0.1:{token_port}/v1/stats", TOKEN)
        assert status == 200
        assert {v for _, v in reserved} == {json.loads(body)["devices"][0]["reserved_bytes"]}

        (refused,) = wait_for(lambda: query(prom_port, 'up{job="fragviz-wrong-token"}'),
                              "a scrape with the wrong token", procs, logs)
        assert refused["value"][1] == "0", "the wrong token is refused"
        assert query(prom_port, 'fragviz_reserved_bytes{job="fragviz-wrong-token"}') == []
        targets = json.loads(get(f"http://127.0.0.1:{prom_port}/api/v1/targets")[1])["data"]["activeTargets"]
        health = {t["labels"]["job"]: (t["health"], t["lastError"]) for t in targets}
        assert health["fragviz"][0] == "up" and health["fragviz-token"][0] == "up"
        assert health["fragviz-wrong-token"][0] == "down" and "401" in health["fragviz-wrong-token"][1]
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
