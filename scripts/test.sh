#!/usr/bin/env bash
# Set up, then run every test. Tests read the real snapshots from ../shared/real_snapshots; the browser
# tests need Debian's Chromium and the live tests Debian's Prometheus, both installed here when missing, and
# the store's tests a PostgreSQL server, installed and started by scripts/postgres.sh.
#
# bash scripts/test.sh [--quick] [PYTEST ARGS...]
#   --quick   the fast tiers only: unit tests and the integration tests that are neither slow nor on PostgreSQL,
#             no browser (-m "not slow and not browser and not postgres"; tiers: tests/conftest.py), in 2 workers
#             (-n 2 --dist loadfile; a later -n wins, -n 0 runs them in this process); no PostgreSQL server is
#             started for them. About 2 minutes on a 2-core machine (3.5 in one process).
#   -n N      (pytest-xdist) N workers; add --dist loadfile so the tests of a file, which may share a server or
#             store, stay on one worker (tests/conftest.py), as .ci/run does.
# Any other argument goes to pytest as it is.
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
args=()
for arg in "$@"; do
    if [ "$arg" = "--quick" ]; then quick=1; else args+=("$arg"); fi
done
if [ "$quick" = 1 ]; then
    args=(-m "not slow and not browser and not postgres" -n 2 --dist loadfile ${args[@]+"${args[@]}"})
fi
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
# A real PostgreSQL server for the store's tests on its second engine (tests/support/pg.py), unless one is
# given or the quick tiers leave those tests out
if [ -z "${FRAGVIZ_TEST_PG:-}" ] && [ "$quick" = 0 ]; then
    echo "starting the PostgreSQL test server (scripts/postgres.sh)"
    FRAGVIZ_TEST_PG=$(bash scripts/postgres.sh | tail -1)
    export FRAGVIZ_TEST_PG
fi
# The tests start hundreds of Python processes (the fragviz command, servers, agents): each would compile pandas,
# SQLAlchemy and fragviz afresh where PYTHONDONTWRITEBYTECODE is set, 1-2 s apiece; the first import writes them
unset PYTHONDONTWRITEBYTECODE
exec .venv/bin/python -m pytest ${args[@]+"${args[@]}"}
