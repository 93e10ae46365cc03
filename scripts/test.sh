#!/usr/bin/env bash
# Set up, then run every test. Tests read the real snapshots from ../shared/real_snapshots; the browser
# tests need Debian's Chromium and the live tests Debian's Prometheus, both installed here when missing, and
# the store's tests a PostgreSQL server, installed and started by scripts/postgres.sh.
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
# A real PostgreSQL server for the store's tests on its second engine (tests/pg.py), unless one is given
if [ -z "${FRAGVIZ_TEST_PG:-}" ]; then
    FRAGVIZ_TEST_PG=$(bash scripts/postgres.sh | tail -1)
    export FRAGVIZ_TEST_PG
fi
exec .venv/bin/python -m pytest "$@"
