#!/usr/bin/env bash
# Set up, then run every test. Tests read the real snapshots from ../shared/real_snapshots; the browser
# tests need Debian's Chromium, installed here when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ ! -x /usr/bin/chromium ]; then
    if [ "$(id -u)" = 0 ]; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium > /dev/null
    else
        echo "the browser tests need Debian's chromium: sudo apt-get install chromium" >&2
        exit 1
    fi
fi
exec .venv/bin/python -m pytest "$@"
