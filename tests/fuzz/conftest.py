"""One worker pool for the fuzz tests: two processes (or the CPUs), a 3 GiB address space each, 20 s an input."""
from __future__ import annotations

import os

import pytest

from .harness import Pool

DEADLINE_S = float(os.environ.get("FRAGVIZ_FUZZ_DEADLINE", 20))


@pytest.fixture(scope="session")
def pool(real_dir, tmp_path_factory):
    p = Pool(real_dir, workers=max(2, min(4, os.cpu_count() or 2)), deadline=DEADLINE_S,
             tmp=str(tmp_path_factory.mktemp("fuzz")))
    yield p
    p.close()


@pytest.fixture(scope="session")
def hostile_cases(pool, real_dir):
    from .hostile import all_cases  # built after the pool: the payloads aim at its canary folder

    return all_cases(real_dir)


@pytest.fixture(scope="session")
def failures_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("fuzz-failures"))
