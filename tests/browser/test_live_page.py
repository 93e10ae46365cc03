"""The live page in a real browser: a real torch training loop with the agent, the dashboard attaching to it
over HTTP, the chart growing while the job runs, the OOM alert with its verdict, several ranks side by side."""
from __future__ import annotations

import os
import subprocess
import sys
import urllib.request

import pytest

from tests.support.helpers import ROOT, free_port, wait_for
from tests.support.server import Server

FRAGVIZ = os.path.join(os.path.dirname(sys.executable), "fragviz")
TRAIN_LOOP = os.path.join(ROOT, "tests", "live", "train_loop.py")
CHART = "[id*='\"type\":\"live-chart\"'] .js-plotly-plot"


class Job:
    """`fragviz run` of the training loop on a simulated 256 MiB device, on a free port."""

    def __init__(self, tmp_path, *args: str, token: str | None = None) -> None:
        self.port = free_port()
        self.trigger = str(tmp_path / f"oom-{self.port}")
        cmd = [FRAGVIZ, "run", "--port", str(self.port), "--device-memory", "256MiB"]
        if token:
            cmd += ["--token", token]
        cmd += ["--", sys.executable, TRAIN_LOOP, "--step-ms", "30", "--trigger", self.trigger, *args]
        self.proc = subprocess.Popen(cmd, cwd=str(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        headers = {"Authorization": f"Bearer {token}"} if token else {}

        def answers() -> bool:
            try:
                urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{self.port}/v1/stats",
                                                              headers=headers), timeout=2)
            except OSError:
                return False
            return True

        def gone() -> str | None:
            return None if self.proc.poll() is None else "the job exited: " + self.proc.stderr.read().decode()[-2000:]

        wait_for(answers, f"the job's agent on port {self.port}", deadline=90, interval=0.3, gone=gone)

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


@pytest.fixture
def live_server(tmp_path):
    srv = Server(str(tmp_path / "live.sqlite"), samples=False, log=str(tmp_path / "server.log"))
    yield srv
    srv.stop()


def points(page, nth: int = 0) -> int:
    return page.evaluate(f"document.querySelectorAll(`{CHART}`)[{nth}].data[2].x.length")


def attach(page, server, target: str, token: str = "") -> None:
    page.goto(server.url + "/live")
    page.fill("#live-target", target)
    if token:
        page.fill("#live-token", token)
    page.click("#live-attach")


def test_the_chart_grows_while_the_job_runs_and_the_oom_arrives_with_a_verdict(page, live_server, tmp_path):
    job = Job(tmp_path)
    try:
        attach(page, live_server, job.target)
        page.wait_for_selector(CHART, timeout=60000)
        assert "simulated device" in page.locator(".fv-live-panel h3").inner_text()
        first = points(page)
        # appended by the page's one-second refresh, never redrawn: the count only grows
        page.wait_for_function(f"document.querySelector(`{CHART}`).data[2].x.length >= {first + 3}", timeout=60000)
        # the first polls may come before the model exists (a loaded machine starts the job slowly): wait for it
        page.wait_for_function(f"(document.querySelector(`{CHART}`).data[2].y.filter(v => v !== null)"
                               ".slice(-1)[0] || 0) > 0", timeout=60000)
        assert "reserved" in page.locator("[id*='live-now']").inner_text()
        page.wait_for_selector("[id*='live-segment-map'] .bars path", timeout=60000)

        open(job.trigger, "w").close()  # the job asks for 512 MiB on its 256 MiB device
        alert = page.locator(".fv-live-oom")
        alert.wait_for(timeout=60000)
        text = alert.inner_text()
        assert "Out of memory" in text and "true exhaustion" in text
        oom_marks = page.evaluate(f"document.querySelector(`{CHART}`).data[6].x.length")
        assert oom_marks >= 1
        alert.locator("a").click()
        page.wait_for_url("**/snapshots/*")
        page.wait_for_selector("#oom-verdict .fv-verdict", timeout=60000)
        assert "True exhaustion" in page.locator("#oom-verdict").inner_text()
        assert page.errors == []
    finally:
        job.stop()


def test_several_ranks_side_by_side_and_a_saved_snapshot(page, live_server, tmp_path):
    jobs = [Job(tmp_path), Job(tmp_path, "--width", "512")]
    try:
        for job in jobs:
            attach(page, live_server, job.target)
            page.wait_for_selector(f".fv-live-panel >> text={job.target}", timeout=60000)
        page.wait_for_function(f"document.querySelectorAll(`{CHART}`).length == 2", timeout=60000)
        titles = page.locator(".fv-live-panel h3").all_inner_texts()
        assert all(any(job.target in t for t in titles) for job in jobs)
        for nth in (0, 1):
            page.wait_for_function(f"document.querySelectorAll(`{CHART}`)[{nth}].data[2].x.length >= 3",
                                   timeout=60000)
        page.locator("[id*='\"type\":\"live-save\"']").first.click()
        link = page.locator("[id*='live-save-result'] a")
        link.wait_for(timeout=60000)
        sid = link.get_attribute("href").rsplit("/", 1)[-1]
        names = {str(r["id"]): r["name"] for r in live_server.get_json("/api/snapshots")}
        assert "saved" in names[sid]
        assert page.errors == []
    finally:
        for job in jobs:
            job.stop()


def test_a_wrong_token_is_refused_on_the_page(page, live_server, tmp_path):
    job = Job(tmp_path, token="right-token")
    try:
        attach(page, live_server, job.target, token="wrong-token")
        error = page.locator("#live-status .fv-error")
        error.wait_for()
        assert "refused" in error.inner_text() and "token" in error.inner_text()
        assert page.locator(CHART).count() == 0
        attach(page, live_server, job.target, token="right-token")
        page.wait_for_selector(CHART, timeout=60000)
    finally:
        job.stop()


def test_a_dead_job_says_so_and_counts_on_and_a_reload_still_shows_it(page, live_server, tmp_path):
    """Killed: its panel says how long no sample has come, counting on, greys its last figures; the chart has the
    device's capacity line; a reload shows the ended job's panel, not an empty page."""
    job = Job(tmp_path)
    try:
        attach(page, live_server, job.target)
        page.wait_for_selector(CHART, timeout=60000)
        assert page.evaluate(f"document.querySelector(`{CHART}`).layout.shapes.length") == 1  # the device line
        assert "device 256.00 MiB" in page.locator(CHART).inner_text()
    finally:
        job.stop()
    stale = page.locator(".fv-stale-age")
    stale.wait_for(timeout=60000)
    first = int(stale.inner_text().split()[3])
    page.wait_for_function(f"parseInt(document.querySelector('.fv-stale-age').innerText.split(' ')[3]) > {first}",
                           timeout=60000)
    assert "the job ended or cannot be reached" in stale.inner_text()
    assert "last known: reserved" in page.locator(".fv-stale").inner_text()
    # once the poller gives the job up (no sample for LIVE_WINDOW), a reload still opens on it
    page.wait_for_function("document.querySelector('.fv-stale-age') && "
                           "parseInt(document.querySelector('.fv-stale-age').innerText.split(' ')[3]) > 16",
                           timeout=60000)
    page.reload()
    page.wait_for_selector(".fv-live-panel .fv-stale-age", timeout=60000)
    assert page.errors == []
