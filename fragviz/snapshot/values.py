"""Single values of a snapshot checked into the model's types and ranges, at the parse boundary.

Every value the parser keeps goes through here once: integers into their ranges (PyTorch's sizes,
addresses and times are int64 or size_t), strings within max_string characters and storable (a lone
surrogate or a NUL becomes U+FFFD), free-form fields (allocator_settings, external_annotations) copied into plain
JSON data under a budget of objects and a depth limit, so that memo-shared references (a "billion
laughs") are refused before anything walks them. Messages name the file, the field and where, and show
the bad value cut to 80 characters.
"""
from __future__ import annotations

import re
from typing import Any

from fragviz.base.errors import SnapshotFormatError
from fragviz.base.limits import Limits
from fragviz.base.units import cut

INT64_MAX = (1 << 63) - 1
INT64_MIN = -(1 << 63)
# Free-form fields may build this many objects whatever the file's size; beyond it, max_objects_per_byte.
MIN_OBJECT_BUDGET = 100_000
_SURROGATES = re.compile("[\ud800-\udfff]")


def describe(value: Any) -> str:
    """A short description of any value for an error message; never walks a container."""
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, int):
        return str(value) if value.bit_length() <= 128 else f"an integer of {value.bit_length():,} bits"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return repr(cut(value[:200]))
    if isinstance(value, (list, tuple, dict, set, bytes, bytearray)):
        n = len(value)
        return f"a {type(value).__name__} of {n:,} item{'' if n == 1 else 's'}"
    return f"a {type(value).__name__}"


class Values:
    """The checks of one parse: they share its limits and its budget of free-form objects."""

    def __init__(self, source: str, limits: Limits, payload_size: int) -> None:
        self.source = source
        self.limits = limits
        self.budget = max(MIN_OBJECT_BUDGET, limits.max_objects_per_byte * payload_size)

    def fail(self, problem: str) -> SnapshotFormatError:
        return SnapshotFormatError(self.source, problem)

    def integer(self, value: Any, where: str, low: int = 0, high: int = INT64_MAX) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(f"{where} is {describe(value)}, not an integer")
        if not low <= value <= high:
            raise self.fail(f"{where} is {describe(value)}, outside {low:,}..{high:,}")
        return value

    def text(self, value: Any, where: str) -> str:
        if not isinstance(value, str):
            raise self.fail(f"{where} is {describe(value)}, not a string")
        if len(value) > self.limits.max_string:
            raise self.limits.refuse(self.source, "max_string", f"{where} is a string of {len(value):,} characters")
        if not value.isascii() and _SURROGATES.search(value):
            value = _SURROGATES.sub("\ufffd", value)
        if "\x00" in value:  # no text column of PostgreSQL's holds NUL: one spelling on every engine
            value = value.replace("\x00", "\ufffd")
        return value

    def plain(self, value: Any, where: str) -> Any:
        """A copy of a free-form value as plain JSON data; refused past the depth or the object budget."""
        return self._plain(value, where, 0)

    def _plain(self, value: Any, where: str, depth: int) -> Any:
        self.budget -= 1
        if self.budget < 0:
            raise self.limits.refuse(
                self.source, "max_objects_per_byte",
                f"{where} builds more objects than the file's size allows: shared references expand it")
        if value is None or isinstance(value, (bool, float)):
            return value
        if isinstance(value, int):
            return self.integer(value, where, INT64_MIN, INT64_MAX)
        if isinstance(value, str):
            return self.text(value, where)
        if depth >= self.limits.max_depth:
            raise self.limits.refuse(self.source, "max_depth", f"{where} is nested more than "
                                                               f"{self.limits.max_depth} levels deep")
        if isinstance(value, (list, tuple)):
            return [self._plain(v, where, depth + 1) for v in value]
        if isinstance(value, dict):
            return {self._key(k, where): self._plain(v, f"{where} '{cut(k, 40)}'" if depth == 0 and isinstance(k, str)
                                                     else where, depth + 1) for k, v in value.items()}
        raise self.fail(f"{where} holds {describe(value)}, which is not plain data")

    def _key(self, key: Any, where: str) -> str:
        if isinstance(key, str):
            return self.text(key, where)
        if isinstance(key, int) and not isinstance(key, bool):
            return str(self.integer(key, where, INT64_MIN, INT64_MAX))
        if key is None or isinstance(key, (bool, float)):
            return str(key)
        raise self.fail(f"{where} has a key that is {describe(key)}, not a string")
