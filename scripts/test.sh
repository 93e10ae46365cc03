#!/usr/bin/env bash
# Set up, then run every test. Tests read the real snapshots from ../shared/real_snapshots.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest "$@"
