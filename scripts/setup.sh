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
