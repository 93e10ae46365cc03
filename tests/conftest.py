import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from helpers import REAL  # noqa: E402


@pytest.fixture(scope="session")
def real_dir() -> str:
    if not os.path.isdir(REAL):
        pytest.fail(f"the real snapshots are missing: expected them in {REAL} (../shared beside the clone)")
    return REAL
