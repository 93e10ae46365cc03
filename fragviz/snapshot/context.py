"""What one parse of a snapshot accumulates: interned stacks and strings, warnings, format markers."""
from __future__ import annotations

from typing import Any


from fragviz.base.errors import SnapshotFormatError
from fragviz.base.limits import Limits
from fragviz.model import (NO_STRING)
from fragviz.snapshot.frames import StackInterner
from fragviz.snapshot.values import Values

MAX_WARNINGS = 200


class ParseContext:
    """What one parse accumulates: interned stacks and strings, warnings, format markers."""

    def __init__(self, source: str, limits: Limits, payload_size: int) -> None:
        self.source = source
        self.limits = limits
        self.payload_size = payload_size
        self.values = Values(source, limits, payload_size)
        self.interner = StackInterner(self.values)
        self.strings: list[str] = []
        self._string_ids: dict[str, int] = {}
        self._warnings: dict[str, None] = {}
        self._more_warnings = 0
        self.features: set[str] = set()
        self.blocks = 0

    def warn(self, message: str) -> None:
        if message in self._warnings:
            return
        if len(self._warnings) < MAX_WARNINGS:
            self._warnings[message] = None
        else:
            self._more_warnings += 1

    @property
    def warnings(self) -> list[str]:
        more = [f"... and {self._more_warnings:,} more warnings like these"] if self._more_warnings else []
        return list(self._warnings) + more

    def fail(self, problem: str) -> SnapshotFormatError:
        return SnapshotFormatError(self.source, problem)

    def string_id(self, value: Any, where: str) -> int:
        if value is None:
            return NO_STRING
        value = self.values.text(value, where)
        sid = self._string_ids.get(value)
        if sid is None:
            sid = self._string_ids[value] = len(self.strings)
            self.strings.append(value)
        return sid
