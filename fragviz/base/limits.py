"""What one snapshot file may cost: every input limit in one record, read from fragviz's settings.

Each limit bounds the time or memory an input can take, so no file, however built, can hang fragviz or
exhaust the machine. A file past a limit is refused with a LimitError that names the limit and how to
raise it (FRAGVIZ_<NAME> or `<name> = ...` in fragviz.toml). The defaults sit far above what real
snapshots need (docs/limits.md lists the largest real files' figures).
"""
from __future__ import annotations

from dataclasses import dataclass, fields

from fragviz.base.errors import LimitError
from fragviz.base.settings import SETTINGS, setting


@dataclass(frozen=True)
class Limits:
    max_file_size: int
    max_inflated_size: int
    max_inflate_ratio: int
    max_objects_per_byte: int
    max_events: int
    max_segments: int
    max_blocks: int
    max_frames: int
    max_string: int
    max_depth: int

    @classmethod
    def current(cls) -> Limits:
        """The limits in force now (environment, fragviz.toml, defaults)."""
        return cls(**{f.name: int(setting(f.name)) for f in fields(cls)})

    def refuse(self, source: str, name: str, problem: str) -> LimitError:
        """The error for a file past limit `name`: what is wrong, the limit, and how to raise it."""
        s = SETTINGS[name]
        return LimitError(source, f"{problem} (limit {name} = {s.value()}; raise it with {s.env} or "
                                  f"'{name} = ...' in fragviz.toml)")
