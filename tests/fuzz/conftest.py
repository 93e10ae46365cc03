"""One worker pool for the fuzz tests: two processes (or the CPUs), a 3 GiB address space each, 20 s an input."""
from __future__ import annotations

import os

import pytest

from .harness import Pool

# A bound that tells a hang from slow work, never a measurement: 20 s of a core, scaled by the share of one this
# run's worker gets when pytest-xdist runs more workers than there are cores (-n 4 on 2 cores: 40 s; the input
# of 1,000,000 empty gzip members took over 20 s there)
CORE_SHARE = max(1.0, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) / (os.cpu_count() or 1))
DEADLINE_S = float(os.environ.get("FRAGVIZ_FUZZ_DEADLINE", 20)) * CORE_SHARE


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
