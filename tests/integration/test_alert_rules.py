"""The Prometheus alert rules (docs/prometheus/fragviz-alerts.yml, shown as they are on docs/prometheus.md):
Prometheus's own promtool checks them and runs their unit tests (they fire on a fragmented device, not on a
healthy one, a small one or a short spike), and every metric they name is one the agent exports."""
from __future__ import annotations

import os
import re
import subprocess

import pytest

from fragviz.live.protocol import AGENT_METRICS, DEVICE_METRICS, JOB_METRICS

PROMTOOL = "/usr/bin/promtool"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RULES = os.path.join(ROOT, "docs", "prometheus", "fragviz-alerts.yml")


def promtool(*args: str) -> subprocess.CompletedProcess:
    if not os.path.exists(PROMTOOL):
        pytest.fail(f"{PROMTOOL} is missing: apt-get install prometheus (scripts/test.sh does it)")
    return subprocess.run([PROMTOOL, *args], cwd=os.path.dirname(RULES), capture_output=True, text=True, timeout=60)


def test_promtool_checks_the_rules():
    done = promtool("check", "rules", RULES)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 3 rules found" in done.stdout


def test_the_rules_fire_where_they_should_and_nowhere_else():
    done = promtool("test", "rules", "fragviz-alerts.test.yml")
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_rules_name_only_metrics_the_agent_exports():
    exported = {name for _, name, _, _ in DEVICE_METRICS + AGENT_METRICS} | set(JOB_METRICS)
    named = set(re.findall(r"\b(fragviz_[a-z_]+)\b", open(RULES).read()))
    assert named and named <= exported, named - exported


def test_the_prometheus_page_shows_the_rules_as_they_are():
    page = open(os.path.join(ROOT, "docs", "prometheus.md")).read()
    rules = open(RULES).read()
    body = rules[rules.index("groups:"):]
    assert body in page
