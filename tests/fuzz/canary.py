"""Classes that write a canary file when a pickle gets them to run, and the canary's location.

The harness's worker imports this module, so a pickle that names `tests.fuzz.canary.SetstateCanary` would find
it in an unrestricted unpickler: any file that appears in CANARY_DIR means code from an input ran.
"""
from __future__ import annotations

import os

CANARY_ENV = "FRAGVIZ_FUZZ_CANARY_DIR"


def canary_dir() -> str:
    return os.environ.get(CANARY_ENV, "/tmp/fragviz-fuzz-canary")


def touch(tag: str) -> None:
    with open(os.path.join(canary_dir(), f"ran-{tag}"), "w") as fh:
        fh.write("code from a fuzz input ran\n")


class SetstateCanary:
    """BUILD calls __setstate__."""

    def __setstate__(self, state):
        touch("setstate")


class NewCanary:
    """NEWOBJ / NEWOBJ_EX call __new__ (and OBJ / INST / REDUCE call the class)."""

    def __new__(cls, *args, **kwargs):
        touch("new")
        return super().__new__(cls)

    def __init__(self, *args, **kwargs):
        touch("init")


class ReduceCanary:
    """Found by name, called through REDUCE."""

    def __call__(self, *args):
        touch("call")


def write_canary(*args):
    touch("function")
