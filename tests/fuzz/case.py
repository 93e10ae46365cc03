"""One fuzz input: its bytes, a name, where it came from, and (for generated ones) how to rebuild it smaller."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Case:
    name: str
    data: bytes
    family: str  # hostile, gzip, json, structured, bytes, real
    recipe: Any = None  # a strategies.Recipe for structured inputs: the tree and its encoding
    note: str = ""
    extra: dict = field(default_factory=dict)
