"""fragviz's tests, a package: test modules import what they share as `tests.support.*`.

Tiers (markers, given by folder in conftest.py): unit, integration (with fuzz), browser; postgres for tests on
the PostgreSQL server, slow for the slowest. `bash scripts/test.sh --quick` runs the fast ones.
"""
