"""The rules of direction, checked on the source: the core never imports the UI."""
from __future__ import annotations

import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGE = os.path.join(ROOT, "fragviz")


def imports_of(path: str) -> set[str]:
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


# The rooms of fragviz, ranked by the flow of the data: a room imports only rooms ranked below it (and
# its own modules). The store is a leaf below everything that makes or reads its records; the command line
# and the UI are the entry points on top.
RANKS = {
    "base": 0,  # the error root, units and allocator constants, settings, limits, progress, cells
    "model": 1,  # the snapshot data model and the figures of a state
    "store": 2,  # SQLite or PostgreSQL: records in, records out
    "snapshot": 2,  # load: a file made safe and parsed into the model
    "allocator": 3,  # the caching allocator's rules, a device model, capture
    "usage": 3,  # sites, kinds, stacks and lifetimes of the allocations
    "replay": 4,  # past states rebuilt from the trace; the analysis of a snapshot
    "simulate": 5,  # the allocator model put to work on a trace: follow, free-run, what-if
    "doctor": 6,  # verdicts on OOMs and the report
    "library": 7,  # the store and the replay together: ingest, stored snapshots, export
    "jobs": 8,  # many ranks of one job
    "live": 8,  # the agent in the job and the poller beside the store
    "cli": 10,  # starts the dashboard (`fragviz serve`)
    "ui": 9,
}
# The one import across the top: the upload child process runs the command line's `fragviz ingest`.
CROSSINGS = {("ui/http/ingest_child.py", "fragviz.cli")}
TOP_LEVEL_MODULES = {"__init__.py", "__main__.py"}


def python_files() -> list[str]:
    return [os.path.join(folder, f) for folder, _, files in os.walk(PACKAGE) for f in sorted(files)
            if f.endswith(".py")]


def room_of_path(path: str) -> str | None:
    rel = os.path.relpath(path, PACKAGE).split(os.sep)
    return rel[0] if len(rel) > 1 else None


def room_of_module(name: str) -> str | None:
    parts = name.split(".")
    return parts[1] if parts[0] == "fragviz" and len(parts) > 1 else None


def test_fragviz_top_holds_only_rooms():
    loose = {f for f in os.listdir(PACKAGE) if f.endswith(".py")} - TOP_LEVEL_MODULES
    assert loose == set(), "modules belong in a room (a package named by the flow)"
    rooms = {d for d in os.listdir(PACKAGE) if os.path.isdir(os.path.join(PACKAGE, d)) and d != "__pycache__"}
    assert rooms == set(RANKS), "a new room takes a rank in RANKS"


def test_no_import_runs_back_up_the_flow():
    offenders = []
    for path in python_files():
        room = room_of_path(path)
        if room is None:
            continue
        rel = os.path.relpath(path, PACKAGE)
        for name in imports_of(path):
            other = room_of_module(name)
            if other is None or other == room or (rel, name.split(".")[0] + "." + other) in CROSSINGS:
                continue
            if RANKS[other] >= RANKS[room]:
                offenders.append(f"{rel} ({room}, {RANKS[room]}) imports {name} ({other}, {RANKS[other]})")
    assert offenders == []


MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def test_no_module_over_400_lines():
    long = {os.path.relpath(p, ROOT): n for p in python_files()
            if (n := sum(1 for _ in open(p, encoding="utf-8"))) > MAX_MODULE_LINES}
    assert long == {}


def test_no_function_over_60_lines():
    long = []
    for path in python_files():
        for node in ast.walk(ast.parse(open(path, encoding="utf-8").read(), path)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long.append(f"{os.path.relpath(path, ROOT)}:{node.lineno} {node.name} ({n} lines)")
    assert long == []


def core_files() -> list[str]:
    """Everything but the entry points (the UI, the command line) and the live room."""
    return [p for p in python_files() if room_of_path(p) not in ("ui", "cli", "live")]


def test_only_the_ui_and_app_import_dash_and_plotly():
    for folder, _, files in os.walk(PACKAGE):
        if os.path.relpath(folder, PACKAGE).split(os.sep)[0] == "ui":
            continue
        for f in files:
            if f.endswith(".py"):
                names = imports_of(os.path.join(folder, f))
                assert not {n for n in names if n.split(".")[0] in ("dash", "plotly")}, f


def test_the_core_never_imports_the_ui():
    offenders = {}
    for path in core_files():
        bad = {n for n in imports_of(path) if n.split(".")[0] in ("dash", "plotly", "flask") or n.startswith("fragviz.ui")}
        if bad:
            offenders[os.path.relpath(path, ROOT)] = sorted(bad)
    assert offenders == {}


def test_the_core_does_not_need_torch():
    offenders = [os.path.relpath(p, ROOT) for p in core_files()
                 if any(n.split(".")[0] == "torch" for n in imports_of(p)) and not p.endswith("recorder.py")]
    assert offenders == []


def test_nothing_unpickles_without_the_restricted_unpickler():
    for path in core_files():
        src = open(path, encoding="utf-8").read()
        assert "pickle.load(" not in src and "pickle.loads(" not in src, path


IN_THE_JOB = ("agent.py", "sources.py", "nvml.py", "protocol.py", "runner.py", "__init__.py")
NOT_FOR_THE_JOB = ("fragviz.store", "fragviz.ui", "fragviz.library.ingest", "fragviz.live.poller", "fragviz.live.manager")


def module_level_imports(path: str) -> set[str]:
    """Imports executed when the module is imported (not those inside functions, which are lazy)."""
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_the_agent_imports_only_the_standard_library_lazy_torch_and_the_core():
    import sys

    live = os.path.join(PACKAGE, "live")
    for f in IN_THE_JOB:
        path = os.path.join(live, f)
        every = imports_of(path)
        assert not {n for n in every if n.split(".")[0] in ("dash", "plotly", "pandas", "flask", "sqlalchemy")}, f
        assert not {n for n in every if n.startswith(NOT_FOR_THE_JOB)}, f
        eager = module_level_imports(path)
        assert not {n for n in eager if n.split(".")[0] == "torch"}, f"{f} imports torch eagerly"
        foreign = {n for n in eager if n.split(".")[0] not in sys.stdlib_module_names and n.split(".")[0] not in
                   ("fragviz", "__future__")}
        assert foreign == set(), f


def test_importing_the_agent_loads_no_ui_and_no_store():
    import subprocess
    import sys

    code = ("import sys, fragviz.live.agent; bad = [m for m in sys.modules if m.split('.')[0] in "
            "('dash', 'plotly', 'pandas', 'flask', 'torch') or m.startswith(('fragviz.store', 'fragviz.ui'))]; "
            "print(bad); sys.exit(1 if bad else 0)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stdout + out.stderr


# The store is a leaf: it stores and fetches records, and knows nothing of how they are made or used.
STORE_MAY_IMPORT = ("fragviz.store", "fragviz.model", "fragviz.model.columns", "fragviz.base.errors", "fragviz.base.settings",
                    "fragviz.base.units")


def test_the_store_is_a_leaf():
    offenders = {}
    folder = os.path.join(PACKAGE, "store")
    for f in sorted(os.listdir(folder)):
        if f.endswith(".py"):
            fragviz = {n for n in imports_of(os.path.join(folder, f)) if n.split(".")[0] == "fragviz"}
            bad = {n for n in fragviz if n != "fragviz" and not n.startswith(STORE_MAY_IMPORT)}  # fragviz: __version__
            if bad:
                offenders[f] = sorted(bad)
    assert offenders == {}


def test_the_ui_reads_through_the_library_not_the_store():
    """Pages and callbacks never open a connection: the UI reads through fragviz.library (which composes the
    store's records and the replay); only the app factory and the API's writer open the store itself."""
    offenders = {}
    for path in python_files():
        rel = os.path.relpath(path, PACKAGE).replace(os.sep, "/")
        if room_of_path(path) == "ui" and rel not in ("ui/factory.py", "ui/http/api.py"):
            bad = {n for n in imports_of(path)
                   if n.startswith(("fragviz.store.engine", "fragviz.store.writer", "sqlalchemy", "sqlite3"))}
            if bad:
                offenders[rel] = sorted(bad)
    assert offenders == {}
