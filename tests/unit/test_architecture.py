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


def core_files() -> list[str]:
    """Everything but the UI, the live agent and the command line (an entry point, like app.py: it starts
    the dashboard with a lazy import)."""
    out = []
    for folder, _, files in os.walk(PACKAGE):
        rel = os.path.relpath(folder, PACKAGE)
        if rel.split(os.sep)[0] in ("ui", "live"):
            continue
        out.extend(os.path.join(folder, f) for f in files if f.endswith(".py") and not (rel == "." and f == "cli.py"))
    return out


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
NOT_FOR_THE_JOB = ("fragviz.store", "fragviz.ui", "fragviz.ingest", "fragviz.live.poller", "fragviz.live.manager")


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
STORE_MAY_IMPORT = ("fragviz.store", "fragviz.model", "fragviz.columns", "fragviz.errors", "fragviz.settings",
                    "fragviz.units")


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
    for folder, _, files in os.walk(os.path.join(PACKAGE, "ui")):
        for f in files:
            if f.endswith(".py") and f not in ("factory.py", "api.py"):
                bad = {n for n in imports_of(os.path.join(folder, f))
                       if n.startswith(("fragviz.store.engine", "fragviz.store.writer", "sqlalchemy", "sqlite3"))}
                if bad:
                    offenders[f] = sorted(bad)
    assert offenders == {}
