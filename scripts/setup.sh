#!/usr/bin/env bash
# Set up a fresh machine for fragviz: a virtual environment in .venv with everything the project and
# its tests need. Safe to run again: it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements.txt 2> >(grep -v "^WARNING: Location" >&2)
.venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps -e . 2> >(grep -v "^WARNING: Location" >&2)
# The fragviz command is .venv/bin/fragviz (pyproject.toml's [project.scripts]): say how to reach it.
if [ ! -x .venv/bin/fragviz ]; then
    echo "set-up failed: .venv/bin/fragviz is missing (pip install -e . did not install it)" >&2
    exit 1
fi
echo "fragviz is set up: run 'source .venv/bin/activate' to put the fragviz command on your PATH (or use .venv/bin/fragviz)"
