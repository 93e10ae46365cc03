"""Fixtures every tier shares, and the tiers themselves: each test gets its markers here, not in its file.

- by folder: tests/unit -> unit, tests/integration -> integration, tests/fuzz -> integration and fuzz,
  tests/browser -> browser;
- postgres: a test on the PostgreSQL test server (the pg_url fixture, an "postgresql" parameter such as
  store_db's or an engine's, or a file of POSTGRES_FILES, whose module fixtures use the server);
- slow: a test in SLOW, the ones that took over 5 s in a serial run on the project's 2-core machine (kept by
  hand from `--durations=0`; a prefix names a whole file or all of a test's parameters).

Under pytest-xdist (`-n N --dist loadgroup`, as .ci/run runs), the tests of a file that share a fixture wider
than a test (a module's server, browser or store; the fuzz run's worker pool) go to one worker together, so
that fixture is built once; other tests spread one by one.
"""
import os

import pytest

from tests.support.helpers import REAL, ROOT

TIERS = {"unit": ("unit",), "integration": ("integration",), "fuzz": ("integration", "fuzz"),
         "browser": ("browser",)}
POSTGRES_FILES = ("tests/integration/test_store_engines.py", "tests/integration/test_bench_jobs.py")
POSTGRES_FIXTURES = {"pg_url"}
SLOW: tuple[str, ...] = ()


def pytest_collection_modifyitems(config, items):
    xdist = config.pluginmanager.hasplugin("xdist")
    for item in items:
        path = os.path.relpath(str(item.path), ROOT).replace(os.sep, "/")
        parts = path.split("/")
        for name in TIERS.get(parts[1] if len(parts) > 2 and parts[0] == "tests" else "", ()):
            item.add_marker(name)
        if _uses_postgres(item, path):
            item.add_marker("postgres")
        if SLOW and item.nodeid.startswith(SLOW):
            item.add_marker("slow")
        if xdist and _shares_a_wide_fixture(item):
            item.add_marker(pytest.mark.xdist_group(path))


def _uses_postgres(item, path: str) -> bool:
    if path in POSTGRES_FILES or POSTGRES_FIXTURES & set(item.fixturenames):
        return True
    params = getattr(item, "callspec", None)
    return params is not None and any(isinstance(v, str) and v == "postgresql" for v in params.params.values())


def _shares_a_wide_fixture(item) -> bool:
    """Whether the test uses one of the project's fixtures that outlives a test (module, class or package
    scope; session scope for the fuzz run's worker pool), which the other tests of its file then share."""
    info = getattr(item, "_fixtureinfo", None)
    for defs in (info.name2fixturedefs.values() if info else ()):
        for fixture in defs:
            where = fixture.baseid or ""  # "tests/fuzz" for a conftest's, the file's node id for a module's
            if where.startswith("tests") and (fixture.scope in ("module", "class", "package")
                                              or (fixture.scope == "session" and where.startswith("tests/fuzz"))):
                return True
    return False


@pytest.fixture(scope="session")
def real_dir() -> str:
    if not os.path.isdir(REAL):
        pytest.fail(f"the real snapshots are missing: expected them in {REAL} (../shared beside the clone)")
    return REAL


@pytest.fixture
def pg_url():
    """A fresh database on the test PostgreSQL server (dropped afterwards)."""
    from tests.support.pg import drop_database, new_database

    url = new_database()
    yield url
    drop_database(url)


@pytest.fixture(params=("sqlite", "postgresql"))
def store_db(request, tmp_path):
    """A store for one test, on each engine in turn: a SQLite path or a PostgreSQL URL."""
    from tests.support.pg import drop_store_target, new_store_target

    target = new_store_target(request.param, tmp_path)
    yield target
    drop_store_target(target)
