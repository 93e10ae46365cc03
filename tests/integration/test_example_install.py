"""examples/memory_gate's install lines work as written: its README's (in a clone of this repository) and its
workflow's (on a CPU runner), each run in a fresh virtual environment, then the example's own pytest as the README
and the workflow run it.

One substitution: the CPU build of PyTorch comes from this machine's package index (`torch==` the version the
project's .venv has), not from download.pytorch.org, which this machine cannot reach."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from tests.support.helpers import ROOT

EXAMPLE = os.path.join(ROOT, "examples", "memory_gate")
TIMEOUT = 600


def readme_commands() -> list[str]:
    """The README's first bash block, line by line, without comments."""
    text = open(os.path.join(EXAMPLE, "README.md"), encoding="utf-8").read()
    block = re.search(r"```bash\n(.*?)```", text, re.S).group(1)
    return [line.split("#", 1)[0].strip() for line in block.splitlines() if line.split("#", 1)[0].strip()]


def workflow_commands() -> tuple[dict, list[str]]:
    """The install step's environment and every `run` line of the workflow."""
    with open(os.path.join(EXAMPLE, ".github", "workflows", "memory.yml"), encoding="utf-8") as fh:
        steps = yaml.safe_load(fh)["jobs"]["memory"]["steps"]
    install = next(s for s in steps if "pip install" in s.get("run", ""))
    lines = [line.strip() for s in steps for line in s.get("run", "").splitlines() if line.strip()]
    return install.get("env", {}), lines


def sh(command: str, cwd: str, venv: str, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "VIRTUAL_ENV", "PYTHON"))}
    environ.update(PATH=f"{venv}/bin:{environ['PATH']}", VIRTUAL_ENV=venv, **env)
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=environ, capture_output=True, text=True,
                          timeout=TIMEOUT, stdin=subprocess.DEVNULL)


def ok(done: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert done.returncode == 0, f"{done.args}: exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> str:
    """A fresh virtual environment with the CPU build of PyTorch, as the README's first two lines make one."""
    import torch

    path = str(tmp_path_factory.mktemp("venv") / "venv")
    ok(subprocess.run([sys.executable, "-m", "venv", path], capture_output=True, text=True, timeout=TIMEOUT))
    ok(sh(f"pip install -q torch=={torch.__version__.split('+')[0]}", path, path))
    return path


def is_torch_line(command: str) -> bool:
    return command.startswith("pip install torch ")


def test_the_readme_installs_fragviz_from_the_clone_and_its_pytest_passes(venv, tmp_path):
    commands = readme_commands()
    assert commands[0].startswith("python -m venv") and any(is_torch_line(c) for c in commands)
    assert "download.pytorch.org/whl/cpu" in next(c for c in commands if is_torch_line(c))
    for command in commands[1:]:
        if command.startswith(". ") or is_torch_line(command):  # the venv is the fixture's, torch is installed
            continue
        if command.startswith("pytest"):
            project = tmp_path / "memory_gate"  # the installed fragviz, run on a copy: the clone stays clean
            shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
            done = ok(sh(f"{command} -p no:cacheprovider", str(project), venv))
            assert re.search(r"\b4 passed\b", done.stdout), done.stdout
        else:
            ok(sh(command, EXAMPLE, venv))  # pip install pytest ../.. : from the example's folder in the clone
    done = ok(sh("python -c 'import fragviz, sys; print(fragviz.__file__)'", str(tmp_path), venv))
    assert done.stdout.startswith(venv), "fragviz should be the one installed in the new environment"


def test_the_workflow_installs_what_its_variable_names_and_runs_the_budgeted_tests(venv, tmp_path):
    env, lines = workflow_commands()
    assert "FRAGVIZ_PACKAGE" in env
    install = next(line for line in lines if "FRAGVIZ_PACKAGE" in line)
    unset = sh(install, str(tmp_path), venv)  # without the variable: the step stops and says what to set
    assert unset.returncode != 0 and "set the repository variable FRAGVIZ_PACKAGE" in unset.stderr
    ok(sh(install, str(tmp_path), venv, FRAGVIZ_PACKAGE=ROOT))
    project = tmp_path / "memory_gate"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    run = next(line for line in lines if line.startswith("pytest"))
    ok(sh(f"{run} -p no:cacheprovider", str(project), venv))
    assert len(os.listdir(project / "memory-snapshots")) == 4 and (project / "memory-junit.xml").exists()
