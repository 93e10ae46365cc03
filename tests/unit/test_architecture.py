"""The rules of direction, checked on the source: the core never imports the UI."""
from __future__ import annotations

import ast
import os
import re

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
    "predict": 6,  # a bigger run predicted from smaller recordings (`fragviz predict`)
    "library": 7,  # the store and the replay together: ingest, stored snapshots, export
    "jobs": 8,  # many ranks of one job
    "live": 8,  # the agent in the job and the poller beside the store
    "gate": 8,  # a run's memory judged against budgets and a baseline (`fragviz gate`, the compare page's card)
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


# The modules that record a workload (fragviz capture and run, the gate's pytest plugin): they import torch, lazily
RECORDERS = ("fragviz/allocator/recorder.py", "fragviz/gate/record.py",
             # CUDA code on a CPU, what the simulated recorder runs the code under
             "fragviz/allocator/cudasim.py", "fragviz/allocator/cudaapi.py", "fragviz/allocator/tensor_moves.py")


def test_the_core_does_not_need_torch():
    offenders = [os.path.relpath(p, ROOT) for p in core_files()
                 if any(n.split(".")[0] == "torch" for n in imports_of(p)) and os.path.relpath(p, ROOT) not in RECORDERS]
    assert offenders == []
    for recorder in RECORDERS:
        eager = module_level_imports(os.path.join(ROOT, recorder))
        assert not {n for n in eager if n.split(".")[0] == "torch"}, f"{recorder} imports torch when imported"


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


def test_the_agents_start_loads_the_standard_library_and_a_few_of_its_own_modules_only():
    """What `fragviz run` loads into every job before its script: no torch, no numpy, nothing of the allocator."""
    import subprocess
    import sys

    code = ("import sys; before = set(sys.modules); from fragviz.live.runner import _start; "
            "import fragviz.live.agent, fragviz.live.watch; "
            "new = [m for m in set(sys.modules) - before if m.split('.')[0] not in sys.stdlib_module_names]; "
            "print(sorted(m for m in new if not m.startswith(('fragviz.live', 'fragviz.base'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0 and out.stdout.strip() == "['fragviz']", out.stdout + out.stderr


def test_what_the_agent_needs_in_the_jobs_interpreter_is_what_it_checks_for():
    """The in-job agent's modules (its sources, the allocator model) need torch and fragviz.live.runner.AGENT_NEEDS
    beyond the standard library: an interpreter without them is refused at start, not when the job imports torch."""
    import subprocess
    import sys

    from fragviz.live.runner import AGENT_NEEDS

    code = ("import sys; import fragviz.live.sources, fragviz.allocator.recorder, fragviz.live.agent; "
            "print(sorted({m.split('.')[0] for m in sys.modules} - set(sys.stdlib_module_names) - {'fragviz', 'torch'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    found = set(eval(out.stdout)) if out.returncode == 0 else None  # noqa: S307  (our own child's list of names)
    assert found is not None and set(AGENT_NEEDS) <= found, out.stdout + out.stderr
    assert found - set(AGENT_NEEDS) <= {"__main__", "_distutils_hack", "__editable___fragviz_0_1_0_finder"}, found


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


# The UI's own rules: ui/ is split by what each part is (http, pages, figures, data); every page has one
# contract; its JavaScript lives in assets/ and reads no private field of Plotly's; every id is in ids.py.
UI = os.path.join(PACKAGE, "ui")
ASSETS = os.path.join(ROOT, "assets")
PAGES = os.path.join(UI, "pages")
SHARED_BY_PAGES = ("common.py",)  # the header, cards, URL helpers: not a page


def ui_files(*rooms: str) -> list[str]:
    """The modules under fragviz/ui, or under its rooms (ui/http, ui/pages, ...)."""
    roots = tuple(os.path.join(UI, room) + os.sep for room in rooms) or (UI + os.sep,)
    return [p for p in python_files() if p.startswith(roots)]


def parsed(path: str) -> ast.Module:
    return ast.parse(open(path, encoding="utf-8").read(), path)


def called(node: ast.Call) -> str | None:
    return node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)


def page_names() -> list[str]:
    return sorted(n.removesuffix(".py") for n in os.listdir(PAGES)
                  if n not in ("__init__.py", "__pycache__", *SHARED_BY_PAGES)
                  and (n.endswith(".py") or os.path.isfile(os.path.join(PAGES, n, "__init__.py"))))


def test_every_page_is_routed_and_exports_path_layout_and_register_with_a_typed_context():
    import importlib
    import inspect
    import typing

    import dash

    from fragviz.ui.context import AppContext
    from fragviz.ui.factory import ROUTES

    assert sorted({r.page.__name__.rsplit(".", 1)[-1] for r in ROUTES}) == page_names()
    for name in page_names():
        page = importlib.import_module(f"fragviz.ui.pages.{name}")
        assert isinstance(page.PATH, str) and page.PATH.startswith("/"), name
        layout, register = typing.get_type_hints(page.layout), typing.get_type_hints(page.register)
        assert layout["ctx"] is AppContext and register["ctx"] is AppContext, name
        assert register["app"] is dash.Dash and register["return"] is type(None), name
        assert list(inspect.signature(page.layout).parameters) == ["ctx", "pathname", "search"], name
        assert list(inspect.signature(page.register).parameters) == ["app", "ctx"], name


def test_the_routing_table_sends_each_path_to_its_page():
    from fragviz.ui.factory import page_for
    from fragviz.ui.pages import compare, doctor, job, library, live, snapshot, whatif

    assert page_for("/") is library and page_for("/snapshots/3") is snapshot and page_for("/whatif/3") is whatif
    assert page_for("/jobs/2") is job and page_for("/compare") is compare and page_for("/live") is live
    assert page_for("/doctor") is doctor and page_for("/nowhere") is None and page_for("/live/x") is None


def test_page_helpers_take_the_app_context_typed():
    """A parameter named ctx is the AppContext, annotated so; Dash's own ctx is imported as dash_ctx."""
    offenders = []
    for path in ui_files("pages"):
        for node in ast.walk(parsed(path)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for arg in node.args.posonlyargs + node.args.args + node.args.kwonlyargs:
                    typed = arg.annotation is not None and ast.unparse(arg.annotation) == "AppContext"
                    if arg.arg == "app_ctx" or (arg.arg == "ctx" and not typed):
                        offenders.append(f"{os.path.relpath(path, ROOT)}:{node.lineno} {node.name}({arg.arg})")
            elif isinstance(node, ast.ImportFrom) and node.module == "dash":
                offenders += [f"{os.path.relpath(path, ROOT)}: from dash import ctx" for a in node.names
                              if a.name == "ctx" and a.asname in (None, "ctx")]
    assert offenders == []


def test_no_javascript_in_python_strings():
    """Clientside callbacks name a function of assets/ (ClientsideFunction); no Python string holds a script."""
    script = re.compile(r"\bfunction\s*\w*\s*\([\w\s,]*\)\s*\{|[\w)]\s*=>")  # function (a) {, a =>, (a) =>
    offenders = []
    for path in ui_files():
        for node in ast.walk(parsed(path)):
            where = f"{os.path.relpath(path, ROOT)}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, ast.Call) and called(node) == "clientside_callback":
                if not (node.args and isinstance(node.args[0], ast.Call) and called(node.args[0]) == "ClientsideFunction"):
                    offenders.append(f"{where} clientside_callback without a ClientsideFunction")
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and script.search(node.value):
                offenders.append(f"{where} {node.value[:40]!r}")
    assert offenders == []


def clientside_functions() -> set[tuple[str, str]]:
    """(namespace, function name) of every ClientsideFunction the UI names."""
    names = set()
    for path in ui_files():
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.Call) and called(node) == "ClientsideFunction":
                args = [a.value for a in node.args if isinstance(a, ast.Constant)]
                args += [k.value.value for k in node.keywords if isinstance(k.value, ast.Constant)]
                names.add(tuple(args))
    return names


def test_every_clientside_function_is_in_assets_and_reads_no_private_plotly_field():
    scripts = {f: open(os.path.join(ASSETS, f), encoding="utf-8").read() for f in os.listdir(ASSETS) if f.endswith(".js")}
    text = "\n".join(scripts.values())
    for namespace, name in clientside_functions():
        assert namespace == "fragviz", name
        assert re.search(rf"\b{name}\s*[:=]\s*function\b", text), f"{name} is not defined in assets/"
    private = re.compile(r"\._(?:full|size\b|length\b|offset\b|input\b|context\b)\w*")
    assert {f: private.findall(js) for f, js in scripts.items() if private.search(js)} == {}


def literal_id(node: ast.AST) -> bool:
    """A component id written out: a string, or a pattern-matching id whose type is a string."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return True
    return isinstance(node, ast.Dict) and any(
        isinstance(k, ast.Constant) and k.value == "type" and isinstance(v, ast.Constant) for k, v in
        zip(node.keys, node.values))


def test_every_component_id_comes_from_ids():
    offenders = []
    for path in ui_files():
        if path == os.path.join(UI, "ids.py"):
            continue
        for node in ast.walk(parsed(path)):
            if not isinstance(node, ast.Call):
                continue
            given = [k.value for k in node.keywords if k.arg in ("id", "component_id")]
            if called(node) in ("Input", "Output", "State") and node.args:
                given.append(node.args[0])
            offenders += [f"{os.path.relpath(path, ROOT)}:{node.lineno}" for value in given if literal_id(value)]
    assert offenders == []


# (room of ui/, imports it may not make): the HTTP side, the figures and the shaping never reach up into the
# pages; the figures are pure (records in, go.Figure out: no Dash, no library, no store); the shaping and the
# HTTP side draw nothing.
UI_ROOM_BANS = {
    "http": ("fragviz.ui.pages", "fragviz.ui.figures", "dash", "plotly"),
    "data": ("fragviz.ui.pages", "fragviz.ui.figures", "fragviz.ui.http", "dash", "plotly"),
    "figures": ("fragviz.ui.pages", "fragviz.ui.http", "fragviz.library", "fragviz.store", "dash"),
}


def test_the_ui_rooms_import_one_way():
    offenders = {}
    for room, banned in UI_ROOM_BANS.items():
        for path in ui_files(room):
            bad = {n for n in imports_of(path) if any(n == b or n.startswith(b + ".") for b in banned)}
            if bad:
                offenders[os.path.relpath(path, ROOT)] = sorted(bad)
    assert offenders == {}
