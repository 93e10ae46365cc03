"""Opening a store: a SQLite file or a PostgreSQL database, one code path through SQLAlchemy Core.

`open_store(target)` takes what `--db` / FRAGVIZ_DB give: a file path (SQLite) or a `postgresql://` URL
(psycopg 3). It creates the schema or migrates an older one (fragviz.store.schema), refuses a newer one, and
turns the engines' failures into one-line StoreErrors that name the store (a URL without its password).
"""
from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from typing import Any, Iterator

from sqlalchemy import Connection, LargeBinary, Table, create_engine, event, inspect, select, text
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError

from fragviz.base.errors import StoreBusyError, StoreError
from fragviz.base.settings import redact_url, setting
from fragviz.store import schema
from fragviz.base.units import cut

SERVER_SCHEMES = ("postgresql", "postgres")  # what SQLAlchemy calls the backend of postgresql[+driver]://
MIGRATION_LOCK = 0x66726167  # the PostgreSQL advisory lock a migrating process holds ("frag")
FREE_SPACE_FLOOR = 1 << 20
# SQLite's names for a write that found no room: the database, its journal, or its shared-memory index
_FULL_ERRORS = {"SQLITE_FULL", "SQLITE_IOERR_SHMSIZE", "SQLITE_IOERR_WRITE", "SQLITE_IOERR_FSYNC",
                "SQLITE_IOERR_TRUNCATE", "SQLITE_CANTOPEN"}


def is_server_url(target: str) -> bool:
    return "://" in target


def redacted(target: str) -> str:
    """`target` fit for a message: a URL without its password."""
    return redact_url(target) if is_server_url(target) else target


class Store:
    """One store and its engine. Thread-safe: each call checks a connection out of the engine's pool.

    On SQLite, writers in this process take `write_lock` (SQLite has one writer at a time; waiting here is
    cheaper than waiting on the file); PostgreSQL takes many writers at once.
    """

    def __init__(self, engine: Engine, label: str, path: str | None) -> None:
        self.engine = engine
        self.label = label  # what messages call it: the file, or the URL without its password
        self.path = path  # the SQLite file, or None for a server
        self.write_lock = threading.Lock() if path else _NoLock()

    @property
    def is_sqlite(self) -> bool:
        return self.path is not None

    @contextmanager
    def reading(self) -> Iterator[Connection]:
        """A connection for reads (its implicit transaction is rolled back at the end)."""
        try:
            with self.engine.connect() as conn:
                yield conn
        except (DBAPIError, self.engine.dialect.loaded_dbapi.Error) as exc:
            raise self.error(exc) from None

    @contextmanager
    def writing(self) -> Iterator[Connection]:
        """One write transaction (BEGIN IMMEDIATE on SQLite): committed at the end, rolled back on any error."""
        with self.write_lock:
            try:
                with self.engine.connect().execution_options(fragviz_write=True) as conn, conn.begin():
                    yield conn
            except (DBAPIError, self.engine.dialect.loaded_dbapi.Error) as exc:
                raise self.error(exc) from None

    def rows(self, sql: str, **params: Any) -> list[tuple]:
        """The rows of one SQL query with named parameters (`:name`): none when a parameter is an integer no
        column can hold (an id of 2^63 or more matches no row; the engines would fail on it, each its own way)."""
        if not params_fit(params):
            return []
        with self.reading() as conn:
            return [tuple(r) for r in conn.execute(text(sql), params)]

    def error(self, exc: BaseException) -> StoreError:
        """The words for the engine's failure (SQLAlchemy's or its driver's): busy, full, unreachable,
        unreadable, or not a store."""
        orig = exc.orig if isinstance(exc, DBAPIError) else exc
        words = cut(str(orig).strip().splitlines()[0] if str(orig).strip() else type(orig).__name__, 160)
        if self.is_sqlite:
            if _sqlite_busy(orig):
                return StoreBusyError(f"{self.label}: the store is busy with another writer; try again")
            if _disk_full(self.path, orig):
                return StoreError(f"{self.label}: the store cannot grow: the disk is full ({words}); it is unchanged")
            if type(orig).__name__ == "OperationalError":
                return StoreError(f"{self.label}: the store cannot be opened or written ({words})")
            return StoreError(f"{self.label}: not a fragviz store ({words})")
        if getattr(orig, "sqlstate", None) is None and type(orig).__name__ == "OperationalError":
            reason = words.rsplit("failed: ", 1)[-1]  # psycopg: "connection to server at ..., port N failed: why"
            return StoreError(f"{self.label}: cannot reach the store's server ({reason})")
        if getattr(orig, "sqlstate", None) in ("40P01", "55P03"):  # deadlock, lock not available
            return StoreBusyError(f"{self.label}: the store is busy with another writer; try again")
        if getattr(orig, "sqlstate", None) in ("53100",):
            return StoreError(f"{self.label}: the store cannot grow: the server's disk is full ({words})")
        return StoreError(f"{self.label}: the store failed ({words})")

    def close(self) -> None:
        """Close the engine's pooled connections (the store itself stays as it is)."""
        self.engine.dispose()


class _NoLock:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc) -> None:
        return None


def params_fit(params: dict[str, Any]) -> bool:
    """Whether every integer parameter fits a 64-bit column (what every id, count and size here is)."""
    return all(-(1 << 63) <= v < (1 << 63) for v in params.values() if isinstance(v, int))


def open_store(target: str, readonly: bool = False) -> Store:
    """The store at `target` (a SQLite path or a postgresql:// URL), its schema made or brought up to date.

    `readonly`: never create it (a missing SQLite file is an error); an older schema is still migrated where
    the store can be written."""
    store = _server(target) if is_server_url(target) else _sqlite(target, readonly)
    try:
        _ensure_schema(store, readonly)
    except BaseException:
        store.close()
        raise
    return store


def _server(target: str) -> Store:
    label = redacted(target)
    try:
        url = make_url(target)
    except ArgumentError:
        raise StoreError(f"{label}: not a store URL (use a file path, or postgresql://user:password@host/db)") from None
    if url.get_backend_name() not in SERVER_SCHEMES:
        raise StoreError(f"{label}: unknown store URL scheme '{url.drivername}' (use a file path for SQLite, or "
                         "postgresql://user:password@host/db)")
    url = url.set(drivername="postgresql+psycopg")
    timeout = max(1, round(float(setting("busy_timeout"))))
    engine = create_engine(url, pool_pre_ping=True, pool_size=4, max_overflow=8,
                           connect_args={"connect_timeout": timeout, "application_name": "fragviz"})
    return Store(engine, label, None)


def _sqlite(path: str, readonly: bool) -> Store:
    if readonly and not os.path.exists(path):
        raise StoreError(f"{path}: no such store (ingest a snapshot into it first)")
    if not readonly:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    url = URL.create("sqlite", database=os.path.abspath(path))
    engine = create_engine(url, connect_args={"check_same_thread": False}, pool_size=8, max_overflow=56)
    busy_ms = round(float(setting("busy_timeout")) * 1000)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record) -> None:
        dbapi_conn.isolation_level = None  # transactions begin where fragviz says (below), not where sqlite3 guesses
        dbapi_conn.execute(f"PRAGMA busy_timeout={busy_ms}")
        dbapi_conn.execute("PRAGMA foreign_keys=ON")
        dbapi_conn.execute("PRAGMA synchronous=NORMAL")  # with WAL: durable at each checkpoint, never corrupt

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        # a writer takes the write lock at once (never a read lock to upgrade later: that can deadlock);
        # a reader's transaction keeps one snapshot of the file across its queries
        conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get("fragviz_write") else "BEGIN")

    return Store(engine, path, path)


def _ensure_schema(store: Store, readonly: bool) -> None:
    have = _version(store)
    if have is not None and have > schema.SCHEMA_VERSION:
        raise StoreError(f"{store.label}: store schema version {have} is newer than this fragviz (version "
                         f"{schema.SCHEMA_VERSION}): upgrade fragviz")
    if have == schema.SCHEMA_VERSION:
        return
    if readonly and have is None:
        raise StoreError(f"{store.label}: no fragviz store here yet (ingest a snapshot into it first)")
    if readonly and store.is_sqlite and not os.access(store.path, os.W_OK):
        raise StoreError(f"{store.label}: store schema version {have}, this fragviz reads version "
                         f"{schema.SCHEMA_VERSION}, and the file cannot be written to bring it up to date")
    if store.is_sqlite:  # WAL (kept in the file) lets readers read while a writer writes
        raw = store.engine.raw_connection()
        try:
            raw.driver_connection.execute("PRAGMA journal_mode=WAL")
        except DBAPIError as exc:
            raise store.error(exc) from None
        finally:
            raw.close()
    for version in range(have or 0, schema.SCHEMA_VERSION):
        _step(store, version)


def _step(store: Store, version: int) -> None:
    """Bring the store from `version` to `version + 1` (0: empty) in one transaction."""
    from fragviz import __version__

    with store.writing() as conn:
        if not store.is_sqlite:  # one migrating process at a time on a server (SQLite's write lock does that)
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})
        if (_version(store, conn) or 0) != version:  # another process got there first
            return
        if version + 1 not in schema.STEPS:
            raise StoreError(f"{store.label}: no migration from store schema version {version}")
        for table in schema.STEPS[version + 1]:
            table.create(conn, checkfirst=True)
            if not store.is_sqlite:
                _fast_blobs(conn, table)
        if version + 1 in schema.FILLS:
            schema.FILLS[version + 1](conn)
        values = {"schema_version": str(version + 1)}
        if version == 0:
            values["created_by"] = f"fragviz {__version__}"
        for key, value in values.items():
            conn.execute(schema.meta.delete().where(schema.meta.c.key == key))
            conn.execute(schema.meta.insert().values(key=key, value=value))


def _fast_blobs(conn: Connection, table: Table) -> None:
    """PostgreSQL compresses large values with pglz by default, which made storing a snapshot's chunks 10 times
    slower than writing them: its blob columns use lz4 (PostgreSQL 14+), or are stored uncompressed."""
    for column in table.columns:
        if isinstance(column.type, LargeBinary):
            try:
                with conn.begin_nested():
                    conn.execute(text(f'ALTER TABLE {table.name} ALTER COLUMN "{column.name}" SET COMPRESSION lz4'))
            except DBAPIError:  # an older server, or one built without lz4
                conn.execute(text(f'ALTER TABLE {table.name} ALTER COLUMN "{column.name}" SET STORAGE EXTERNAL'))


def _foreign(conn: Connection) -> bool:
    names = set(inspect(conn).get_table_names())
    return bool(names) and "meta" not in names


def _version(store: Store, conn: Connection | None = None) -> int | None:
    if conn is None:
        try:
            with store.engine.connect() as own:
                return _version(store, own)
        except DBAPIError as exc:
            raise store.error(exc) from None
    try:
        if not inspect(conn).has_table("meta"):
            if _foreign(conn):
                raise StoreError(f"{store.label}: the database holds other tables: not a fragviz store")
            return None
        value = conn.execute(select(schema.meta.c.value).where(schema.meta.c.key == "schema_version")).scalar()
    except DBAPIError as exc:
        raise store.error(exc) from None
    return int(value) if value is not None else None


def _sqlite_busy(orig: BaseException) -> bool:
    text_ = str(orig)
    return type(orig).__name__ == "OperationalError" and ("locked" in text_ or "busy" in text_)


def _disk_full(path: str | None, orig: BaseException) -> bool:
    if getattr(orig, "sqlite_errorname", "") == "SQLITE_FULL" or "full" in str(orig):
        return True
    if getattr(orig, "sqlite_errorname", "") not in _FULL_ERRORS or path is None:
        return False
    try:
        stat = os.statvfs(os.path.dirname(os.path.abspath(path)))
    except OSError:
        return False
    return stat.f_bavail * stat.f_frsize < FREE_SPACE_FLOOR


class NewStore:
    """While a command runs: if it made the SQLite store at `target` (and its folders) and keeps nothing, they
    go. A server store is never removed."""

    def __init__(self, target: str) -> None:
        self.path = None if is_server_url(target) else os.path.abspath(target)
        self.existed = self.path is None or os.path.exists(self.path)
        self.new_dirs: list[str] = []
        parent = os.path.dirname(self.path) if self.path else "/"
        while not os.path.exists(parent):
            self.new_dirs.append(parent)
            parent = os.path.dirname(parent)
        self.keep = False

    def discard(self) -> None:
        for suffix in ("", "-wal", "-shm", "-journal"):
            try:
                os.remove(self.path + suffix)
            except FileNotFoundError:
                pass
        for folder in self.new_dirs:  # deepest first
            try:
                os.rmdir(folder)
            except OSError:
                break


@contextmanager
def new_store_guard(target: str) -> Iterator[NewStore]:
    """Yield a NewStore; a SQLite store this block created is removed again unless `keep` is left true."""
    guard = NewStore(target)
    try:
        yield guard
    finally:
        if not guard.existed and not guard.keep:
            guard.discard()

