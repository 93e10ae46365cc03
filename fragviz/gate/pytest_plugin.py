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

Baselines are one small JSON per test id in a directory the project commits: `--memory-baseline=DIR` (or
`memory_baseline = DIR` in the ini file), written by `--memory-update-baseline`. `--memory-snapshots=DIR` also
writes each recorded test's snapshot, for `fragviz gate` or the dashboard. A budget that cannot be checked (a
growth budget without its baseline, a baseline that cannot be read, a budget written wrong) fails its test, never
only warns.

The run's exit status tells a CI what happened, as `fragviz gate`'s does: 0 every test passed, 1 a test failed (a
budget broken, or an ordinary failure), 2 a budget could not be judged (bad input; it wins over 1), 3 a fragviz
bug in the plugin (one line; it wins over 2), 4 a usage error before any test ran (an option or ini value, or a
rootdir and ini file that an option's value changed: `fragviz.gate.pytest_setup`). Each budgeted test's outcome is
also a user property, `fragviz_memory` ("cannot judge", "internal error"), in the JUnit XML.

Only pytest and the standard library are imported when pytest loads the plugin; fragviz's gate and torch are
imported when a test asks for a budget.
"""
from __future__ import annotations

import hashlib
import os
import re
import traceback
import warnings
from contextlib import contextmanager
from typing import Any, Iterator, NoReturn

import pytest

from fragviz.gate.pytest_setup import check_folders, check_setup

BUDGET_NAMES = ("peak", "peak_allocated", "growth", "fragmentation", "device", "alloc_conf")
MARKER = "memory_budget"
DEVICES = ("auto", "cuda", "simulated")
OUTCOME = "fragviz_memory"  # the user property that tells a budgeted test's outcome (JUnit XML's <property>)
CANNOT_JUDGE, INTERNAL_ERROR = "cannot judge", "internal error"
# the run's exit status when a test came to it (1 or 0 before); 3 is fragviz.base.errors.INTERNAL_ERROR_STATUS, written
# out: the plugin imports nothing of fragviz until a test asks for a budget
EXIT_STATUS = {CANNOT_JUDGE: 2, INTERNAL_ERROR: 3}


class MemoryBudgetWarning(UserWarning):
    """A budgeted test that allocated nothing on the recorded device: every budget holds, in case that is a bug."""


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
                    "per test id): growth budgets compare with them. Write --memory-baseline=DIR")
    group.addoption("--memory-update-baseline", action="store_true", help="write each budgeted test's figures as "
                    "its new baseline (growth budgets are not checked in that run)")
    group.addoption("--memory-snapshots", metavar="DIR", help="also write each budgeted test's snapshot there. "
                    "Write --memory-snapshots=DIR")
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
    check_setup(config)  # a rootdir or ini file that an option's value changed: refused, never judged without it
    check_folders(config, baseline_dir(config), snapshots_dir(config))
    if config.getoption("memory_update_baseline") and baseline_dir(config) is None:
        raise pytest.UsageError("--memory-update-baseline needs --memory-baseline=DIR (or memory_baseline in the ini "
                                "file): where to write the baselines")
    config.pluginmanager.register(RunStatus(), "fragviz-memory-status")


class RunStatus:
    """Sets the run's exit status from the budgeted tests' outcomes: 2 when one could not be judged, 3 when the
    plugin met a bug, over pytest's 0 or 1 (its usage errors, interruptions and internal errors stand)."""

    def __init__(self) -> None:
        self.worst = 0

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        for name, value in report.user_properties:
            if name == OUTCOME:
                self.worst = max(self.worst, EXIT_STATUS.get(value, 0))

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.worst and session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
            session.exitstatus = self.worst


@pytest.fixture
def memory_budget(request: pytest.FixtureRequest) -> MemoryBudget:
    """Records this test's allocations; `memory_budget.limit(peak="1GiB", ...)` sets its budgets."""
    return request.node.stash.setdefault(_BUDGET, MemoryBudget())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    marker = item.get_closest_marker(MARKER)
    if marker is None and MARKER not in getattr(item, "fixturenames", ()):
        return (yield)
    raised: list[BaseException] = []  # the test's own exception: its failure, not the plugin's
    with _plugin_part(item, raised):
        budget = item.stash.setdefault(_BUDGET, MemoryBudget())
        if marker is not None:
            budget.budgets = {**_marked(item, marker), **budget.budgets}
        from fragviz.gate.record import recording

        config = item.config
        device = config.getoption("memory_device") or config.getini("memory_device") or "auto"
        _check_alloc_conf(item, budget.budgets.get("alloc_conf"))
        with recording(device, budget.budgets.get("alloc_conf"), root_file=str(item.path)) as rec:
            try:
                outcome = yield
            except BaseException as exc:
                raised.append(exc)
                if isinstance(exc, pytest.UsageError):  # memory_budget.limit(...) written wrong
                    _mark(item, CANNOT_JUDGE)
                raise
        _judge(item, budget, rec)
    return outcome


# what passes through the plugin's part untouched: a verdict given, a skip, an exit, an interruption
_PASSED_THROUGH = (pytest.fail.Exception, pytest.skip.Exception, pytest.exit.Exception, KeyboardInterrupt,
                   GeneratorExit)


@contextmanager
def _plugin_part(item: pytest.Item, raised: list[BaseException]) -> Iterator[None]:
    """Around the plugin's own work: a FragvizError (bad input) fails the test as "cannot judge", any other
    exception as a fragviz bug, each in one line and told apart by the run's exit status (RunStatus)."""
    try:
        yield
    except BaseException as exc:
        if any(exc is e for e in raised) or isinstance(exc, _PASSED_THROUGH):
            raise
        from fragviz.base.errors import FragvizError

        if isinstance(exc, FragvizError):
            cannot_judge(item, str(exc))
        _mark(item, INTERNAL_ERROR)
        shown = f"\n{traceback.format_exc()}" if item.config.get_verbosity() >= 2 else " (-vv shows the traceback)"
        first = str(exc).splitlines()[0][:200] if str(exc) else ""
        raise pytest.fail.Exception(f"{item.nodeid}: fragviz: internal error ({type(exc).__name__}: {first}); this is "
                                    f"a fragviz bug, please report it{shown}", pytrace=False) from None


def _mark(item: pytest.Item, outcome: str) -> None:
    item.user_properties.append((OUTCOME, outcome))


def cannot_judge(item: pytest.Item, message: str) -> NoReturn:
    """Fail the test with one line: a budget that could not be checked (exit status 2 for the run)."""
    _mark(item, CANNOT_JUDGE)
    raise pytest.fail.Exception(f"{item.nodeid}: memory budget cannot be judged: {message}", pytrace=False) from None


def _marked(item: pytest.Item, marker: pytest.Mark) -> dict[str, Any]:
    if marker.args:
        cannot_judge(item, f"memory_budget takes named budgets only ({', '.join(BUDGET_NAMES)})")
    try:
        return MemoryBudget(**marker.kwargs).budgets  # checks the marker's names
    except pytest.UsageError as exc:
        cannot_judge(item, str(exc))


def _check_alloc_conf(item: pytest.Item, conf: Any) -> None:
    if conf is None:
        return
    from fragviz.allocator.config import parse_alloc_conf
    from fragviz.base.errors import FragvizError

    try:
        parse_alloc_conf(str(conf))
    except FragvizError as exc:
        cannot_judge(item, f"memory_budget: alloc_conf: {exc}")


def _judge(item: pytest.Item, budget: MemoryBudget, rec) -> None:
    from fragviz.gate.judge import device_fits, judge
    from fragviz.gate.record import summary_of
    from fragviz.gate.report import gate_text

    config = item.config
    budgets = _budgets(item, budget.budgets)
    summary, analysis = summary_of(rec, item.nodeid, str(config.rootpath))
    budget.summary = summary
    _write_snapshot(config, item.nodeid, rec)
    baseline, budgets = _baseline(item, summary, budgets)
    if not summary.devices:  # every budget holds for a test that allocates nothing; it says so, in case that is a bug
        warnings.warn(MemoryBudgetWarning(f"{item.nodeid}: no allocation was recorded on the {rec.device} device: "
                                          "nothing to judge"))
        return
    fits = device_fits(analysis, budgets.device_memory, budgets.alloc_conf) if budgets.device_memory else None
    result = judge(summary, baseline, budgets, fits)
    budget.result = result
    if result.exit_code == 2:
        _mark(item, CANNOT_JUDGE)
    if not result.passed:
        _step_summary(result)
        pytest.fail(gate_text(result), pytrace=False)


def _budgets(item: pytest.Item, given: dict[str, Any]):
    from fragviz.base.errors import FragvizError
    from fragviz.gate.budgets import budgets_from_text

    conf = given.get("alloc_conf") if given.get("device") is not None else None  # alone: the recording's settings
    try:
        return budgets_from_text(_text(given.get("peak")), _text(given.get("peak_allocated")),
                                 _text(given.get("growth")), _text(given.get("fragmentation")),
                                 _text(given.get("device")), conf)
    except FragvizError as exc:
        cannot_judge(item, f"memory_budget: {_marker_words(str(exc))}")


def _baseline(item: pytest.Item, summary, budgets):
    """(the test's baseline or None, the budgets to check): --memory-update-baseline writes it (and checks no
    growth); a growth budget without a baseline cannot be judged, and fails its test."""
    from fragviz.base.files import write_output
    from fragviz.gate.figures import read_summary

    config = item.config
    folder = baseline_dir(config)
    path = None if folder is None else os.path.join(folder, baseline_name(item.nodeid))
    if config.getoption("memory_update_baseline"):
        _make_folder(folder, "the baseline folder")
        write_output(path, summary.to_json())
        return None, _without_growth(budgets)
    if path is not None and os.path.lexists(path):  # a broken link too: read, and refused in one line
        return read_summary(path), budgets
    if budgets.growth is not None and path is None:
        cannot_judge(item, "its growth budget has no baseline to grow from: give a baseline folder "
                     "(--memory-baseline=DIR, or memory_baseline in the ini file) and write the baselines with "
                     "pytest --memory-update-baseline")
    if budgets.growth is not None:
        cannot_judge(item, f"no memory baseline {path} for its growth budget: write it with pytest "
                     "--memory-update-baseline (and commit it)")
    return None, budgets


def _step_summary(result) -> None:
    """On GitHub Actions, a failing test's report also goes to the run's summary page."""
    path = os.environ.get("GITHUB_STEP_SUMMARY")
    if not path:
        return
    from fragviz.base.files import append_text
    from fragviz.gate.report import gate_markdown

    append_text(path, gate_markdown(result) + "\n", "$GITHUB_STEP_SUMMARY")


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
        return os.path.join(str(config.invocation_params.dir), given)
    given = config.getini("memory_baseline")
    if not given:
        return None
    return os.path.join(str(config.rootpath), given)


def snapshots_dir(config: pytest.Config) -> str | None:
    """--memory-snapshots, relative to where pytest was started (not to a folder a test moved to)."""
    given = config.getoption("memory_snapshots")
    return os.path.join(str(config.invocation_params.dir), given) if given else None


def baseline_name(nodeid: str) -> str:
    """A test id as a file name: 'tests/test_x.py::test_y[a]' -> 'tests.test_x.py--test_y[a].json'."""
    name = re.sub(r"[^A-Za-z0-9._\-\[\]]", "_", nodeid.replace("::", "--").replace("/", "."))
    if len(name) > 150:
        name = name[:130] + "-" + hashlib.sha256(nodeid.encode()).hexdigest()[:16]
    return name + ".json"


def _write_snapshot(config: pytest.Config, nodeid: str, rec) -> None:
    folder = snapshots_dir(config)
    if not folder:
        return
    from fragviz.base.files import write_output

    _make_folder(folder, "--memory-snapshots")
    write_output(os.path.join(folder, baseline_name(nodeid)[:-len(".json")] + ".pickle"), rec.pickled)


def _make_folder(folder: str, label: str) -> None:
    from fragviz.base.errors import OutputError

    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"{label} {folder}: cannot be created ({exc.strerror or exc})") from None
