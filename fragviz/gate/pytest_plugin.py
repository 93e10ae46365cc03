"""fragviz's pytest plugin: memory budgets on tests (on by installing fragviz: the `pytest11` entry point).

    @pytest.mark.memory_budget(peak="2GiB", growth="5%", device="24GiB")
    def test_train_step(): ...

    def test_eval(memory_budget):
        memory_budget.limit(peak_allocated="512MiB")
        ...

A test with the marker or the fixture has its allocations recorded while it runs (on CUDA through PyTorch's memory
history, on a CPU through fragviz's simulated device: `fragviz.gate.record`), and fails when a budget breaks, with
the gate's report as its failure. Budgets: `peak` (peak reserved), `peak_allocated`, `growth` (each peak over the
test's baseline), `fragmentation` (at the reserved peak), `device` (the trace simulated on a device of that size
must not run out of memory), `alloc_conf` (the allocator settings to record and simulate under).

Baselines are one small JSON per test id in a directory the project commits: `--memory-baseline DIR` (or
`memory_baseline = DIR` in the ini file), written by `--memory-update-baseline`. `--memory-snapshots DIR` also
writes each recorded test's snapshot, for `fragviz gate` or the dashboard.

Only pytest and the standard library are imported when pytest loads the plugin; fragviz's gate and torch are
imported when a test asks for a budget.
"""
from __future__ import annotations

import hashlib
import os
import re
import warnings
from typing import Any, NoReturn

import pytest

BUDGET_NAMES = ("peak", "peak_allocated", "growth", "fragmentation", "device", "alloc_conf")
MARKER = "memory_budget"
DEVICES = ("auto", "cuda", "simulated")


class MemoryBudgetWarning(UserWarning):
    """A budget the plugin could not check (a growth budget without a baseline directory)."""


class MemoryBudget:
    """The budgets of one test (the marker's, then those `limit` sets while it runs) and, once it has run, its
    figures (`summary`) and verdict (`result`)."""

    def __init__(self, **budgets: Any) -> None:
        self.budgets: dict[str, Any] = {}
        self.summary = None
        self.result = None
        self.limit(**budgets)

    def limit(self, **budgets: Any) -> None:
        __tracebackhide__ = True  # a misuse in a test shows the test's line, not the plugin's
        unknown = sorted(set(budgets) - set(BUDGET_NAMES))
        if unknown:
            raise pytest.UsageError(f"memory_budget: unknown budget(s) {', '.join(unknown)} (known: "
                                    f"{', '.join(BUDGET_NAMES)})")
        self.budgets.update({k: v for k, v in budgets.items() if v is not None})


_BUDGET = pytest.StashKey[MemoryBudget]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fragviz", "memory budgets (fragviz)")
    group.addoption("--memory-baseline", metavar="DIR", help="directory of the tests' memory baselines (one JSON "
                    "per test id): growth budgets compare with them")
    group.addoption("--memory-update-baseline", action="store_true", help="write each budgeted test's figures as "
                    "its new baseline (growth budgets are not checked in that run)")
    group.addoption("--memory-snapshots", metavar="DIR", help="also write each budgeted test's snapshot there")
    group.addoption("--memory-device", choices=DEVICES, default=None,
                    help="record on CUDA or on fragviz's simulated device (default auto: CUDA where available)")
    parser.addini("memory_baseline", "directory of the tests' memory baselines (relative to the rootdir)")
    parser.addini("memory_device", "auto, cuda or simulated (default auto)", default="auto")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "memory_budget(peak=None, peak_allocated=None, growth=None, fragmentation=None, "
                            "device=None, alloc_conf=None): record the test's allocations and fail it when a memory "
                            "budget breaks (fragviz)")
    device = config.getini("memory_device")
    if device not in DEVICES:
        raise pytest.UsageError(f"memory_device = {device!r} in the ini file: use one of {', '.join(DEVICES)}")
    if config.getoption("memory_update_baseline") and baseline_dir(config) is None:
        raise pytest.UsageError("--memory-update-baseline needs --memory-baseline DIR (or memory_baseline in the ini "
                                "file): where to write the baselines")


@pytest.fixture
def memory_budget(request: pytest.FixtureRequest) -> MemoryBudget:
    """Records this test's allocations; `memory_budget.limit(peak="1GiB", ...)` sets its budgets."""
    return request.node.stash.setdefault(_BUDGET, MemoryBudget())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    marker = item.get_closest_marker(MARKER)
    if marker is None and MARKER not in getattr(item, "fixturenames", ()):
        return (yield)
    budget = item.stash.setdefault(_BUDGET, MemoryBudget())
    if marker is not None:
        budget.budgets = {**_marked(item, marker), **budget.budgets}
    from fragviz.gate.record import recording

    config = item.config
    device = config.getoption("memory_device") or config.getini("memory_device") or "auto"
    _check_alloc_conf(item, budget.budgets.get("alloc_conf"))
    with recording(device, budget.budgets.get("alloc_conf"), root_file=str(item.path)) as rec:
        outcome = yield
    _judge(item, budget, rec)
    return outcome


def _misuse(item: pytest.Item, message: str) -> NoReturn:
    """A budget written wrong fails its test with one line naming it, not with a traceback of the plugin."""
    raise pytest.fail.Exception(f"{item.nodeid}: {message}", pytrace=False) from None


def _marked(item: pytest.Item, marker: pytest.Mark) -> dict[str, Any]:
    if marker.args:
        _misuse(item, f"memory_budget takes named budgets only ({', '.join(BUDGET_NAMES)})")
    try:
        return MemoryBudget(**marker.kwargs).budgets  # checks the marker's names
    except pytest.UsageError as exc:
        _misuse(item, str(exc))


def _check_alloc_conf(item: pytest.Item, conf: Any) -> None:
    if conf is None:
        return
    from fragviz.allocator.config import parse_alloc_conf
    from fragviz.base.errors import FragvizError

    try:
        parse_alloc_conf(str(conf))
    except FragvizError as exc:
        _misuse(item, f"memory_budget: alloc_conf: {exc}")


def _judge(item: pytest.Item, budget: MemoryBudget, rec) -> None:
    from fragviz.base.errors import FragvizError
    from fragviz.base.files import write_atomically
    from fragviz.gate.budgets import budgets_from_text
    from fragviz.gate.figures import read_summary
    from fragviz.gate.judge import device_fits, judge
    from fragviz.gate.record import summary_of
    from fragviz.gate.report import gate_text

    config = item.config
    b = budget.budgets
    conf = b.get("alloc_conf") if b.get("device") is not None else None  # alone, it is the recording's settings
    try:
        budgets = budgets_from_text(_text(b.get("peak")), _text(b.get("peak_allocated")), _text(b.get("growth")),
                                    _text(b.get("fragmentation")), _text(b.get("device")), conf)
    except FragvizError as exc:
        _misuse(item, f"memory_budget: {_marker_words(str(exc))}")
    summary, analysis = summary_of(rec, item.nodeid, str(config.rootpath))
    budget.summary = summary
    _write_snapshot(config, item.nodeid, rec)
    folder = baseline_dir(config)
    path = None if folder is None else os.path.join(folder, baseline_name(item.nodeid))
    baseline = None
    if config.getoption("memory_update_baseline"):
        os.makedirs(folder, exist_ok=True)
        write_atomically(path, summary.to_json())
        budgets = _without_growth(budgets)
    elif path is not None and os.path.exists(path):
        baseline = read_summary(path)
    elif budgets.growth is not None:
        if path is not None:
            pytest.fail(f"{item.nodeid}: no memory baseline {path}: run pytest --memory-update-baseline to write it",
                        pytrace=False)
        warnings.warn(MemoryBudgetWarning(f"{item.nodeid}: growth budget not checked: no baseline directory "
                                          "(--memory-baseline DIR or memory_baseline in the ini file)"))
        budgets = _without_growth(budgets)
    if not summary.devices:  # every budget holds for a test that allocates nothing; it says so, in case that is a bug
        warnings.warn(MemoryBudgetWarning(f"{item.nodeid}: no allocation was recorded on the {rec.device} device: "
                                          "nothing to judge"))
        return
    fits = device_fits(analysis, budgets.device_memory, budgets.alloc_conf) if budgets.device_memory else None
    result = judge(summary, baseline, budgets, fits)
    budget.result = result
    if not result.passed:
        _step_summary(result)
        pytest.fail(gate_text(result), pytrace=False)


def _step_summary(result) -> None:
    """On GitHub Actions, a failing test's report also goes to the run's summary page."""
    path = os.environ.get("GITHUB_STEP_SUMMARY")
    if not path:
        return
    from fragviz.gate.report import gate_markdown

    with open(path, "a", encoding="utf-8") as fh:
        fh.write(gate_markdown(result) + "\n")


# the gate's options, as the marker names them
_MARKER_WORDS = {"--max-peak-reserved": "peak", "--max-peak-allocated": "peak_allocated", "--max-growth": "growth",
                 "--max-fragmentation": "fragmentation", "--device-memory": "device"}


def _marker_words(message: str) -> str:
    for option, word in _MARKER_WORDS.items():
        message = message.replace(option, word)
    return message


def _without_growth(budgets):
    from dataclasses import replace

    return replace(budgets, growth=None)


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def baseline_dir(config: pytest.Config) -> str | None:
    """--memory-baseline (relative to where pytest was started, as its other paths are), else the ini file's
    memory_baseline (relative to the rootdir, where the ini file is)."""
    given = config.getoption("memory_baseline")
    if given:
        return os.path.abspath(given)
    given = config.getini("memory_baseline")
    if not given:
        return None
    return given if os.path.isabs(given) else os.path.join(str(config.rootpath), given)


def baseline_name(nodeid: str) -> str:
    """A test id as a file name: 'tests/test_x.py::test_y[a]' -> 'tests.test_x.py--test_y[a].json'."""
    name = re.sub(r"[^A-Za-z0-9._\-\[\]]", "_", nodeid.replace("::", "--").replace("/", "."))
    if len(name) > 150:
        name = name[:130] + "-" + hashlib.sha256(nodeid.encode()).hexdigest()[:16]
    return name + ".json"


def _write_snapshot(config: pytest.Config, nodeid: str, rec) -> None:
    folder = config.getoption("memory_snapshots")
    if not folder:
        return
    os.makedirs(folder, exist_ok=True)
    from fragviz.base.files import write_atomically

    write_atomically(os.path.join(folder, baseline_name(nodeid)[:-len(".json")] + ".pickle"), rec.pickled)
