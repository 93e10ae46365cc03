"""fragviz's own settings in one table: name, default, help.

Each setting is read, first match wins, from: an explicit value (a command-line option), the environment
variable FRAGVIZ_<NAME>, the file `fragviz.toml` (the path in $FRAGVIZ_CONFIG, else ./fragviz.toml, else
~/.config/fragviz/fragviz.toml; keys at the top level or under [fragviz]), then the default. Sizes take
units ("2GiB"), durations take units ("30s"). `fragviz limits` prints every setting and where it came from.
"""
from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable

from fragviz.base.errors import FragvizError, UsageError
from fragviz.base.units import cut, parse_duration, parse_size


@dataclass(frozen=True)
class Setting:
    name: str
    default: str
    help: str
    kind: str = "text"  # "text", "int", "size" (bytes, units allowed) or "duration" (seconds, units allowed)

    @property
    def env(self) -> str:
        return "FRAGVIZ_" + self.name.upper()

    def raw(self, override: str | None = None) -> tuple[str, str]:
        """(the value as written, where it came from)."""
        if override is not None:
            return str(override), "option"
        if self.env in os.environ:
            return os.environ[self.env], f"${self.env}"
        config = _config()
        if self.name in config.values:
            return str(config.values[self.name]), config.path
        return self.default, "default"

    def value(self, override: str | None = None) -> str:
        return self.raw(override)[0]


@dataclass(frozen=True)
class _Config:
    path: str
    values: dict
    tables: dict = field(default_factory=dict)  # the file's other tables ([kinds]...), for their own readers


def config_path() -> str | None:
    """The fragviz.toml in use, if any."""
    explicit = os.environ.get("FRAGVIZ_CONFIG")
    if explicit:
        return explicit
    for candidate in ("fragviz.toml", os.path.join(os.path.expanduser("~"), ".config", "fragviz", "fragviz.toml")):
        if os.path.isfile(candidate):
            return candidate
    return None


def _config() -> _Config:
    path = config_path()
    if path is None:
        return _Config("", {})
    try:
        stat = os.stat(path)
    except OSError as exc:
        raise UsageError(f"{path}: the fragviz config cannot be read ({exc.strerror or exc})") from None
    return _read_config(path, stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=4)
def _read_config(path: str, _mtime: int, _size: int) -> _Config:
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except OSError as exc:
        raise UsageError(f"{path}: the fragviz config cannot be read ({exc.strerror or exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: the fragviz config is not valid TOML ({exc})") from None
    values = {k: v for k, v in data.items() if not isinstance(v, dict)}
    values.update(data.get("fragviz", {}) if isinstance(data.get("fragviz"), dict) else {})
    unknown = sorted(set(values) - set(SETTINGS))
    if unknown:
        raise UsageError(f"{path}: unknown setting '{unknown[0][:80]}' (known: {', '.join(SETTINGS)})")
    tables = {k: v for k, v in data.items() if isinstance(v, dict) and k != "fragviz"}
    return _Config(path, values, tables)


def config_table(name: str) -> dict:
    """A table of the fragviz.toml in use other than the settings (for example [kinds]); {} when absent."""
    path = config_path()
    table = _config().tables.get(name, {})
    if not isinstance(table, dict):
        raise UsageError(f"{path}: [{name}] must be a table")
    return table


def _data_home() -> str:
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(base, "fragviz", "fragviz.sqlite")


SETTINGS = {
    s.name: s for s in (
        Setting("db", _data_home(), "the timeline store: a SQLite file path or a postgresql:// URL"),
        # Input limits (fragviz.base.limits): each bounds what one snapshot file may cost.
        Setting("max_file_size", "8GiB", "largest snapshot file read, compressed or not", "size"),
        Setting("max_inflated_size", "16GiB", "largest size a compressed snapshot may inflate to", "size"),
        Setting("max_inflate_ratio", "200", "largest inflated/compressed size ratio (real snapshots: 5-40)", "int"),
        Setting("max_objects_per_byte", "64", "objects free-form fields (allocator_settings, annotations) may "
                "build per byte of the file, a shared reference counted each time it is reached", "int"),
        Setting("max_events", "20000000", "trace events per snapshot, all devices together", "int"),
        Setting("max_segments", "1000000", "segments per snapshot", "int"),
        Setting("max_blocks", "10000000", "blocks per snapshot, all segments together", "int"),
        Setting("max_frames", "1000", "frames per stack", "int"),
        Setting("max_string", "65536", "characters per string (frame names, file names, metadata)", "int"),
        Setting("max_depth", "64", "nesting depth of lists and dicts", "int"),
        # The dashboard's server
        Setting("max_upload_size", "4GiB", "largest upload the dashboard accepts", "size"),
        Setting("upload_slots", "4", "uploads the dashboard receives at once (more get 503 and Retry-After)",
                "int"),
        Setting("read_timeout", "30s", "how long the dashboard waits on a silent client", "duration"),
        Setting("upload_min_rate", "16KiB", "slowest an upload may arrive, in bytes a second over each "
                "read_timeout (slower: 408, its slot freed; 0: no floor)", "size"),
        Setting("page_state_events", "500000", "trace events up to which the snapshot page is sent a device's "
                "every state once and rebuilds each event's state itself (longer: one request per event)", "int"),
        Setting("busy_timeout", "10s", "how long a store write waits on another writer before 'busy'",
                "duration"),
    )
}


def _parser(kind: str) -> Callable[[str], float | int | str]:
    return {"int": int, "size": parse_size, "duration": parse_duration}.get(kind, str)


def setting(name: str, override: str | None = None) -> float | int | str:
    """The value of a setting, parsed by its kind; a bad value is a UsageError that names where it came from."""
    s = SETTINGS[name]
    text, origin = s.raw(override)
    try:
        value = _parser(s.kind)(text.strip() if isinstance(text, str) else text)
    except (ValueError, TypeError, FragvizError) as exc:
        raise UsageError(f"{s.name} = {text[:80]!r} (from {origin}) is not a valid {s.kind} "
                         f"({str(exc)[:120]})") from None
    if s.kind != "text" and value < 0:
        raise UsageError(f"{s.name} = {text[:80]!r} (from {origin}) must not be negative")
    return value


def describe() -> list[tuple[str, str, str, str]]:
    """(name, value, where it came from, help) for every setting; a store URL's password shows as ***."""
    rows = []
    for s in SETTINGS.values():
        value, origin = s.raw()
        rows.append((s.name, redact_url(value) if s.name == "db" and _URL.match(value) else value, origin, s.help))
    return rows


_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


SERVER_SCHEMES = ("postgresql", "postgres", "postgresql+psycopg")


def db_path(override: str | None = None) -> str:
    """The store: a SQLite file (a path, or `sqlite:///path`) or a PostgreSQL URL (`postgresql://…`). Any
    other URL is refused, never made a file."""
    value, origin = SETTINGS["db"].raw(override)
    url = _URL.match(value)
    if url is None:
        return value
    scheme = url.group(1).lower()
    if scheme == "sqlite" and value[url.end():].startswith("/"):
        return value[url.end():]  # sqlite:///abs/path -> /abs/path
    if scheme in SERVER_SCHEMES:
        return value
    raise UsageError(f"--db {redact_url(value)!r} (from {origin}): unknown store URL scheme '{scheme}' (give a "
                     "SQLite path or sqlite:///path, or postgresql://user:password@host/db)")


def redact_url(url: str) -> str:
    """A URL fit for a message: the password replaced by ***, cut to 80 characters."""
    return cut(re.sub(r"(://[^/@:]*):[^/@]*@", r"\1:***@", url))

