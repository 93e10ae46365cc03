import os

import pytest

from tests.support.helpers import REAL


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
