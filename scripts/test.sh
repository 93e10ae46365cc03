#!/usr/bin/env bash
# Set up, then run every test. Tests read the real snapshots from ../shared/real_snapshots; the browser
# tests need Debian's Chromium and the live tests Debian's Prometheus, both installed here when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Debian's chromium (browser tests) and prometheus (a real server scraping a live agent), when missing
missing=""
[ -x /usr/bin/chromium ] || missing="$missing chromium"
[ -x /usr/bin/prometheus ] || missing="$missing prometheus"
if [ -n "$missing" ]; then
    if [ "$(id -u)" = 0 ]; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing > /dev/null
    else
        echo "the tests need Debian's$missing: sudo apt-get install$missing" >&2
        exit 1
    fi
fi
exec .venv/bin/python -m pytest "$@"
