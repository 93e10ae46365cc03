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
