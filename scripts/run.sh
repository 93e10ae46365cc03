#!/usr/bin/env bash
# The main job: set up, then serve the dashboard on http://127.0.0.1:8050 over the embedded store, with the
# bundled samples ingested on first start (python app.py). Extra arguments go to it (--port, --db, --token).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python app.py "$@"
