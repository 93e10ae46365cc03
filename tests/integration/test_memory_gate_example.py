"""examples/memory_gate as a user runs it: its own pytest in a subprocess (fragviz's plugin loaded from the installed
package's entry point), unchanged and with two real regressions, and `fragviz gate` on the snapshots it wrote."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.support.helpers import ROOT

EXAMPLE = os.path.join(ROOT, "examples", "memory_gate")
LEAK_LINE = "        self.seen.append(h)  # every step's activations, kept for debugging\n"
ACTIVATION = "        h = torch.relu(self.fc1(x))\n"
# a global list in the training loop that keeps each step's features: allocated in `train`, beside optimizer.step()
FEATURES_LINE = "        FEATURES.append(model.fc1(x).detach())  # each step's features, for a plot after training\n"
LOSS = "        loss = F.cross_entropy(model(x), y)\n"
STEP = "        optimizer.step()\n"
GPU_TEST = "test_mixed_precision_training_memory"  # tests/test_gpu_memory.py: code written for CUDA


def _env(tmp_path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "GITHUB_"))}
    env["GITHUB_STEP_SUMMARY"] = str(tmp_path / "step_summary.md")
    return env


def run_pytest(project, tmp_path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:dash", *args],
                          cwd=project, env=_env(tmp_path), capture_output=True, text=True, timeout=600)


def gate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fragviz", "gate", *args], capture_output=True, text=True,
                          timeout=300)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The example copied four times: unchanged, with a leak in the model, with a leak in the training loop, with a
    larger hidden size; each run once."""
    out = {}
    for name, change in (("unchanged", None), ("leak", add_leak), ("loop_leak", add_loop_leak), ("wider", widen)):
        project = tmp_path_factory.mktemp(name) / "memory_gate"
        shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
        if change is not None:
            change(project)
        tmp = tmp_path_factory.mktemp(f"{name}-out")
        result = run_pytest(project, tmp, "--memory-snapshots", str(tmp / "snapshots"))
        out[name] = (project, tmp, result)
    return out


def add_leak(project) -> None:
    """A list that keeps every step's activations alive, as a debugging aid left in by mistake."""
    path = project / "tinynet" / "model.py"
    text = path.read_text()
    assert ACTIVATION in text
    text = text.replace("        self.fc2 = nn.Linear(hidden, classes)\n",
                        "        self.fc2 = nn.Linear(hidden, classes)\n        self.seen: list = []\n")
    path.write_text(text.replace(ACTIVATION, ACTIVATION + LEAK_LINE))


def add_loop_leak(project) -> None:
    """A global list that keeps each step's features (first-layer outputs) alive: its allocations are `train`'s, as
    the optimizer's state is."""
    path = project / "tinynet" / "train.py"
    text = path.read_text()
    assert LOSS in text and STEP in text
    text = text.replace("from tinynet.model import TinyNet\n",
                        "from tinynet.model import TinyNet\n\nFEATURES: list = []\n")
    path.write_text(text.replace(LOSS, FEATURES_LINE + LOSS))


def line_in(project, name: str, line: str) -> int:
    return (project / "tinynet" / name).read_text().splitlines(keepends=True).index(line) + 1


def widen(project) -> None:
    path = project / "tinynet" / "model.py"
    text = path.read_text()
    assert "HIDDEN = 1024\n" in text
    path.write_text(text.replace("HIDDEN = 1024\n", "HIDDEN = 1536\n"))


def activation_site(project) -> str:
    """Where the leaked activations are allocated, "tinynet/model.py:LINE forward", read from the changed file."""
    lines = (project / "tinynet" / "model.py").read_text().splitlines(keepends=True)
    return f"tinynet/model.py:{lines.index(ACTIVATION) + 1} forward"


def failed_tests(result: subprocess.CompletedProcess) -> set[str]:
    return set(re.findall(r"^FAILED tests/test_\w+\.py::(\w+)", result.stdout, re.M))


def train_report(result: subprocess.CompletedProcess) -> str:
    """The training test's failure report in pytest's output (the evaluation test's follows it)."""
    return result.stdout.split("_ test_train_memory _", 1)[1].split("_ test_evaluate_memory _")[0].split(
        "short test summary info")[0]


def gpu_report(result: subprocess.CompletedProcess) -> str:
    """The GPU-style test's failure report (tests/test_gpu_memory.py runs first)."""
    return result.stdout.split(f"_ {GPU_TEST} _", 1)[1].split("_ test_train_memory _")[0]


def evaluate_report(result: subprocess.CompletedProcess) -> str:
    return result.stdout.split("_ test_evaluate_memory _", 1)[1].split("short test summary info")[0]


def grown_sites(report: str) -> list[str]:
    """The site column of the report's grown-sites lines, in order (a site that moved: with its baseline line)."""
    part = report.split("sites whose memory at the peak grew most:", 1)[1]
    return re.findall(r"^\s+[\d.]+ \w?i?B -> [\d.]+ \w?i?B \(\+[\d.]+ \w?i?B\)\s+(\S+ \w+(?: \(line \d+ in the "
                      r"baseline\))?)$", part, re.M)


def test_the_unchanged_project_passes_its_budgets(runs):
    _project, tmp, result = runs["unchanged"]
    assert result.returncode == 0, result.stdout + result.stderr
    assert "4 passed" in result.stdout
    assert not (tmp / "step_summary.md").exists()  # nothing failed: nothing to report
    assert len(os.listdir(tmp / "snapshots")) == 4


def test_the_leak_fails_the_budgeted_tests_naming_the_leaking_site(runs):
    project, tmp, result = runs["leak"]
    assert result.returncode == 1, result.stdout + result.stderr
    assert failed_tests(result) == {"test_train_memory", "test_evaluate_memory", GPU_TEST}
    report = train_report(result)
    assert re.search(r"FAIL Peak allocated growth", report)
    assert grown_sites(report)[0] == activation_site(project)
    summary = (tmp / "step_summary.md").read_text()
    assert summary.count("memory gate FAILED") == 3 and activation_site(project) in summary
    # the same leak in the code written for a GPU, recorded on the simulated CUDA device: named at the same line
    assert grown_sites(gpu_report(result))[0].startswith(activation_site(project))
    # evaluation holds a step's activations in its baseline too: the same site, a line lower (a line was added to
    # __init__ above it), matched by its code
    line = line_in(project, "model.py", ACTIVATION)
    assert grown_sites(evaluate_report(result))[0] == f"{activation_site(project)} (line {line - 1} in the baseline)"


def test_a_leak_in_the_training_loop_is_named_at_its_own_line_not_at_the_optimizer_step(runs):
    project, tmp, result = runs["loop_leak"]
    assert result.returncode == 1, result.stdout + result.stderr
    assert failed_tests(result) == {"test_train_memory"}  # evaluation does not train
    sites = grown_sites(train_report(result))
    assert sites[0] == f"tinynet/train.py:{line_in(project, 'train.py', FEATURES_LINE)} train", sites
    # optimizer.step() holds the most bytes of `train` (AdamW's moments) and moved two lines down: the same site as in
    # the baseline, not grown
    step = f"tinynet/train.py:{line_in(project, 'train.py', STEP)} train"
    assert not [s for s in sites if s.startswith(step)], sites
    assert sites[0] in (tmp / "step_summary.md").read_text()


def test_a_larger_hidden_size_fails_the_growth_budget(runs):
    project, _tmp, result = runs["wider"]
    assert result.returncode == 1, result.stdout + result.stderr
    assert failed_tests(result) == {"test_train_memory", "test_evaluate_memory", GPU_TEST}
    report = train_report(result)
    assert re.search(r"FAIL Peak allocated growth", report)
    # what grows with the parameters, each at its own line: the optimizer's state (AdamW's two moments per weight),
    # the gradients, the weights
    model = (project / "tinynet" / "model.py").read_text().splitlines()
    train = (project / "tinynet" / "train.py").read_text().splitlines()
    weights = f"tinynet/model.py:{model.index('        self.fc1 = nn.Linear(features, hidden)') + 1} __init__"
    moments = f"tinynet/train.py:{train.index('        optimizer.step()') + 1} train"
    gradients = f"tinynet/train.py:{train.index('        loss.backward()') + 1} train"
    assert grown_sites(report)[:3] == [moments, gradients, weights]


def test_fragviz_gate_catches_the_leak_on_the_snapshots_the_plugin_wrote(runs):
    base = runs["unchanged"][1] / "snapshots" / "tests.test_memory.py--test_train_memory.pickle"
    project, tmp, _result = runs["leak"]
    leak = tmp / "snapshots" / "tests.test_memory.py--test_train_memory.pickle"
    caught = gate(str(leak), "--baseline", str(base), "--max-growth", "2%", "--json")
    assert caught.returncode == 1, caught.stderr
    verdict = json.loads(caught.stdout)
    assert not verdict["passed"]
    assert {c["name"] for c in verdict["checks"] if not c["passed"]} == {"peak_reserved_growth",
                                                                        "peak_allocated_growth"}
    top = verdict["sites"][0]
    assert top["site"].endswith(activation_site(project)) and top["after_bytes"] > top["before_bytes"]
    same = gate(str(base), "--baseline", str(base), "--max-growth", "0%")
    assert same.returncode == 0, same.stdout + same.stderr


def test_the_plugin_figures_are_the_same_on_every_run(runs, tmp_path):
    """Deterministic on a CPU: the unchanged project's second run writes baselines equal to the committed ones."""
    project = runs["unchanged"][0]
    again = run_pytest(project, tmp_path, "--memory-update-baseline")
    assert again.returncode == 0, again.stdout + again.stderr
    for name in os.listdir(os.path.join(EXAMPLE, "memory_baselines")):
        committed = json.load(open(os.path.join(EXAMPLE, "memory_baselines", name)))
        written = json.load(open(project / "memory_baselines" / name))
        assert written == committed, name


def test_the_workflow_runs_the_budgeted_tests_on_a_cpu_runner():
    yaml = pytest.importorskip("yaml")
    with open(os.path.join(EXAMPLE, ".github", "workflows", "memory.yml")) as fh:
        workflow = yaml.safe_load(fh)
    job = workflow["jobs"]["memory"]
    runs = [line.strip() for step in job["steps"] for line in step.get("run", "").splitlines()]
    assert job["runs-on"].startswith("ubuntu")  # a CPU runner: no GPU needed
    assert any("download.pytorch.org/whl/cpu" in line for line in runs)
    assert any(line.startswith("pytest") and "--memory-snapshots" in line for line in runs)
    with open(os.path.join(EXAMPLE, "pytest.ini")) as fh:
        ini = fh.read()
    assert "memory_baseline = memory_baselines" in ini and "memory_device = simulated" in ini
