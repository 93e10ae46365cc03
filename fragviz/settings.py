"""fragviz's own settings in one table: name, default, help; each overridable by a FRAGVIZ_* variable."""
from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Setting:
    name: str
    default: str
    help: str

    @property
    def env(self) -> str:
        return "FRAGVIZ_" + self.name.upper()

    def value(self, override: str | None = None) -> str:
        if override is not None:
            return override
        return os.environ.get(self.env, self.default)


def _data_home() -> str:
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(base, "fragviz", "fragviz.sqlite")


SETTINGS = {
    s.name: s for s in (
        Setting("db", _data_home(), "the timeline store: a SQLite file path"),
    )
}


def db_path(override: str | None = None) -> str:
    return SETTINGS["db"].value(override)
