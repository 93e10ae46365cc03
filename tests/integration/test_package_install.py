"""The wheel installs whole: built from a copy of the sources, installed into a fresh virtual environment that
sees no repository and only the wheel's declared dependencies, it runs `fragviz --help`, `ingest`, `report`,
`export --format parquet` and `serve` (its assets and the boot folder of `fragviz run` are package data) from a
folder outside the repository.

No index is asked for anything: the new environment gets the wheel with --no-deps, and the distributions the
wheel's metadata requires (followed through their own requirements, as installed in the project's .venv) are
linked into a folder a .pth file puts on its path. Anything undeclared (psycopg, torch, pytest, ...) is absent,
so a missing declaration fails here. A second check reads every import under fragviz/ and wants each
third-party one declared, in the core or an extra, torch aside (the job's own)."""
from __future__ import annotations

import ast
import email.parser
import importlib.metadata as md
import json
import os
import re
import shutil
import subprocess
import sys
import urllib.request
import zipfile

import pytest
from packaging.requirements import Requirement

from tests.support.helpers import ROOT, free_port, wait_for

SAMPLE = os.path.join(ROOT, "sample_snapshots", "gpt_train.pickle.gz")
NOT_DECLARED = {"torch"}  # `fragviz capture` and `fragviz run` use the job's own PyTorch
TIMEOUT = 300


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def run(*args: str, cwd: str, env: dict | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run(list(args), cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, f"{args}: exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> str:
    """The wheel, built from a copy of what it packages (a build in place would leave build/ in the tree)."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(os.path.join(ROOT, name), src / name)
    shutil.copytree(os.path.join(ROOT, "fragviz"), src / "fragviz", ignore=shutil.ignore_patterns("__pycache__"))
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--disable-pip-version-check",
        "-q", "-w", str(tmp / "dist"), str(src), cwd=str(tmp))
    (path,) = (tmp / "dist").glob("fragviz-*.whl")
    return str(path)


def wheel_metadata(wheel: str) -> email.message.Message:
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        return email.parser.Parser().parsestr(zf.read(name).decode())


def core_requirements(wheel: str) -> list[Requirement]:
    reqs = [Requirement(r) for r in wheel_metadata(wheel).get_all("Requires-Dist") or []]
    return [r for r in reqs if r.marker is None or r.marker.evaluate({"extra": ""})]


def closure(reqs: list[Requirement]) -> dict[str, md.Distribution]:
    """The distributions `reqs` need, followed through their own requirements, as the project's .venv has them;
    each must satisfy the version its requirer asks for."""
    found: dict[str, md.Distribution] = {}
    todo = list(reqs)
    while todo:
        req = todo.pop()
        name = canonical(req.name)
        dist = found.get(name) or md.distribution(req.name)
        assert req.specifier.contains(dist.version, prereleases=True), f"{req} but .venv has {dist.version}"
        if name in found:
            continue
        found[name] = dist
        for extra in req.extras:  # psycopg[binary] and the like: the extra's own requirements too
            todo += [r for r in map(Requirement, dist.requires or [])
                     if r.marker is not None and r.marker.evaluate({"extra": extra})]
        todo += [r for r in map(Requirement, dist.requires or [])
                 if r.marker is None or r.marker.evaluate({"extra": ""})]
    return found


def link_distributions(dists: dict[str, md.Distribution], folder: str) -> None:
    """Symlink each distribution's top-level packages and modules, and its .dist-info, into `folder`."""
    os.makedirs(folder)
    for dist in dists.values():
        base = str(dist.locate_file(""))
        # its files' first path parts: packages, modules, vendored libraries, and its .dist-info folder
        tops = {str(f).split("/")[0] for f in dist.files or [] if not str(f).startswith("..")}
        for top in tops:
            target = os.path.join(base, top)
            if os.path.exists(target) and not os.path.exists(os.path.join(folder, top)):
                os.symlink(target, os.path.join(folder, top))


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> dict:
    """A fresh virtual environment holding the wheel and, through a .pth file, only its declared dependencies."""
    tmp = tmp_path_factory.mktemp("installed")
    venv = str(tmp / "venv")
    run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=str(tmp))
    python = os.path.join(venv, "bin", "python")
    run(sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index",
        "--disable-pip-version-check", "-q", wheel, cwd=str(tmp))
    deps = str(tmp / "deps")
    link_distributions(closure(core_requirements(wheel)), deps)
    site = run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=str(tmp)).stdout.strip()
    with open(os.path.join(site, "declared-dependencies.pth"), "w") as fh:
        fh.write(deps + "\n")
    work = tmp / "work"  # the commands' folder: nothing of the repository in it or above it
    work.mkdir()
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV") and not k.startswith("FRAGVIZ_")}
    env.update(PYTHONNOUSERSITE="1", HOME=str(tmp), PATH=os.path.join(venv, "bin") + os.pathsep + env["PATH"])
    return {"venv": venv, "python": python, "fragviz": os.path.join(venv, "bin", "fragviz"), "work": str(work),
            "env": env, "db": str(tmp / "store.sqlite")}


def test_every_third_party_import_is_declared(wheel):
    meta = wheel_metadata(wheel)
    declared = {canonical(Requirement(r).name) for r in meta.get_all("Requires-Dist") or []}
    core = set(closure(core_requirements(wheel)))
    owners = md.packages_distributions()
    stdlib = set(sys.stdlib_module_names)
    missing = {}
    for folder, _, files in os.walk(os.path.join(ROOT, "fragviz")):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
                if isinstance(node, ast.Import):
                    tops = [a.name.split(".")[0] for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    tops = [node.module.split(".")[0]]
                else:
                    continue
                for top in tops:
                    if top in stdlib or top in ("fragviz", "__future__") or top in NOT_DECLARED:
                        continue
                    dists = {canonical(d) for d in owners.get(top, [top])}
                    if not dists & (declared | core):
                        missing.setdefault(top, []).append(os.path.relpath(path, ROOT))
    assert missing == {}, f"imported under fragviz/ but declared nowhere in pyproject.toml: {missing}"
    assert {"postgres", "live-gpu", "test", "docs"} <= set(meta.get_all("Provides-Extra") or [])


def test_the_wheel_holds_its_package_data(wheel):
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
    assert "fragviz/live/boot/sitecustomize.py" in names  # `fragviz run` puts this folder on the job's path
    for asset in sorted(os.listdir(os.path.join(ROOT, "fragviz", "ui", "assets"))):
        assert f"fragviz/ui/assets/{asset}" in names


def test_the_installed_command_runs_outside_the_repository(installed):
    env, work, fragviz = installed["env"], installed["work"], installed["fragviz"]
    where = run(installed["python"], "-c", "import fragviz, sys; print(fragviz.__file__); print(sys.path)",
                cwd=work, env=env).stdout
    assert where.startswith(installed["venv"]) and ROOT not in where  # the wheel's copy, not the repository's
    for missing in ("psycopg", "torch", "pynvml", "pytest"):  # undeclared: the new environment lacks them
        done = subprocess.run([installed["python"], "-c", f"import {missing}"], cwd=work, env=env,
                              capture_output=True, text=True, timeout=TIMEOUT)
        assert done.returncode != 0, f"{missing} is importable in the new environment"

    assert "ingest" in run(fragviz, "--help", cwd=work, env=env).stdout
    sample = shutil.copy(SAMPLE, work)
    ingested = json.loads(run(fragviz, "ingest", sample, "--db", installed["db"], "--json", cwd=work, env=env).stdout)
    (result,) = ingested
    assert result["status"] == "ingested", result
    from_file = json.loads(run(fragviz, "report", sample, "--json", cwd=work, env=env).stdout)
    from_store = json.loads(run(fragviz, "report", str(result["id"]), "--db", installed["db"], "--json",
                                cwd=work, env=env).stdout)
    assert from_file["devices"] == from_store["devices"] and from_file["devices"]
    out = os.path.join(work, "series.parquet")
    run(fragviz, "export", str(result["id"]), "--db", installed["db"], "--format", "parquet", "-o", out,
        cwd=work, env=env)
    assert open(out, "rb").read(4) == b"PAR1"


def test_the_installed_dashboard_serves_its_assets(installed):
    port = free_port()
    proc = subprocess.Popen([installed["fragviz"], "serve", "--db", installed["db"], "--port", str(port)],
                            cwd=installed["work"], env=installed["env"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)

    def asset(name: str) -> bytes | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/assets/{name}", timeout=5) as resp:
                return resp.read()
        except OSError:
            return None

    try:
        got = wait_for(lambda: asset("style.css"), "the installed dashboard's style.css", deadline=120,
                       gone=lambda: None if proc.poll() is None else f"fragviz serve exited ({proc.returncode})",
                       tail=lambda: "" if proc.poll() is None else "\n" + proc.stderr.read()[-3000:])
        assert got == open(os.path.join(ROOT, "fragviz", "ui", "assets", "style.css"), "rb").read()
        assert asset("upload.js")
    finally:
        proc.terminate()
        proc.wait(30)
