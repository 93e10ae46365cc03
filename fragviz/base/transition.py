"""Temporary: record["key"] and record.get("key") read the record's attribute, while the callers that read
results as dicts are converted to attributes (issue 23). To be removed with its last user."""
from __future__ import annotations

from typing import Any


class KeyedForTransition:
    def __getitem__(self, key: str) -> Any:
        try:
            return getattr(self, key)
        except AttributeError:
            raise KeyError(key) from None

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key, default)
