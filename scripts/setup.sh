#!/usr/bin/env bash
# Set up a fresh machine for fragviz: a virtual environment in .venv with everything the project and
# its tests need. Safe to run again: it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
step() { echo "set-up: $*"; }
if [ ! -x .venv/bin/python ]; then
    step "creating .venv with $("$PYTHON" --version 2>&1)"
    "$PYTHON" -m venv .venv
fi
# pip shows its progress when it has something to install: the first time, or after requirements.txt changed
# (a copy of the one last installed is kept in .venv); otherwise it only checks, quietly
stamp=.venv/fragviz-requirements.txt
if [ -f "$stamp" ] && cmp -s requirements.txt "$stamp"; then
    step "checking .venv against requirements.txt (unchanged since the last set-up)"
    pip_output=(--quiet)
else
    step "installing requirements.txt into .venv (a few minutes the first time: PyTorch is the largest)"
    pip_output=(--progress-bar on)
fi
# --no-compile: Python compiles each module the first time it is imported (and keeps it, unless
# PYTHONDONTWRITEBYTECODE is set) instead of pip compiling every file of every package (PyTorch's thousands) up
# front; a fresh set-up takes about a minute less
.venv/bin/python -m pip install "${pip_output[@]}" --disable-pip-version-check --no-compile -r requirements.txt \
    2> >(grep -v "^WARNING: Location" >&2)
cp requirements.txt "$stamp"
step "installing fragviz itself into .venv, editable (pip install -e .)"
.venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps -e . 2> >(grep -v "^WARNING: Location" >&2)
# The fragviz command is .venv/bin/fragviz (pyproject.toml's [project.scripts]): say how to reach it.
if [ ! -x .venv/bin/fragviz ]; then
    echo "set-up failed: .venv/bin/fragviz is missing (pip install -e . did not install it)" >&2
    exit 1
fi
echo "fragviz is set up: run 'source .venv/bin/activate' to put the fragviz command on your PATH (or use .venv/bin/fragviz)"
