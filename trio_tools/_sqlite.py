"""The SQLite durable journal: :func:`open_sqlite_journal` and :class:`SqliteJournal`.

Stdlib :mod:`sqlite3` in WAL mode, one connection owned by one writer thread (see
``_writer.Writer``), group commit, a per-session lock file, and the schema version in
``PRAGMA user_version``.
"""

# the package's modules share underscore helpers with each other:
# pyright: reportPrivateUsage=false
# run-time validation of values from untyped callers:
# pyright: reportUnnecessaryIsInstance=false

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import sqlite3
from collections.abc import AsyncGenerator, Sequence
from typing import Any, Literal, final

import trio

from ._journal import StoreJournal
from ._store import LIVE, RECOVERED, SqlStore
from ._util import NoPublicConstructor
from ._writer import Writer, running_writer

__all__ = ["SCHEMA_VERSION", "SqliteJournal", "open_sqlite_journal"]

SCHEMA_VERSION = 1
"""The journal schema this version of the library writes and reads."""

_HEADER = b"SQLite format 3\x00"
# How long a write waits for another process's transaction on the same file (seconds).
_BUSY_TIMEOUT = 10.0

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS trio_tools_batches (
    session TEXT NOT NULL,
    seq INTEGER NOT NULL,
    state INTEGER NOT NULL,  -- {LIVE}: written by its batch, {RECOVERED}: closed by recovery
    PRIMARY KEY (session, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS trio_tools_calls (
    session TEXT NOT NULL,
    seq INTEGER NOT NULL,
    position INTEGER NOT NULL,
    call TEXT NOT NULL,  -- the ToolCall wire form, JSON
    dispatched INTEGER NOT NULL DEFAULT 0,  -- the write-ahead dispatch marker
    settled TEXT,  -- the ToolResult wire form published for the call
    committed INTEGER NOT NULL DEFAULT 0,
    result TEXT,  -- the committed result when it is not the settled one
    PRIMARY KEY (session, seq, position)
) WITHOUT ROWID;
PRAGMA user_version = {SCHEMA_VERSION};
"""
_TABLES = frozenset({"trio_tools_batches", "trio_tools_calls"})


class _SqliteStore(SqlStore):
    """The journal's operations on one SQLite connection (writer thread only)."""

    __slots__ = ("_conn", "_lock")

    def __init__(self, conn: sqlite3.Connection, session: str, lock: int) -> None:
        super().__init__(session)
        self._conn = conn
        self._lock = lock

    def begin(self) -> None:
        # IMMEDIATE: take the write lock now, so another process's writer makes this wait
        # (busy timeout) instead of failing at the first write.
        self._conn.execute("BEGIN IMMEDIATE")

    def commit(self) -> None:
        self._conn.execute("COMMIT")

    def rollback(self) -> None:
        if self._conn.in_transaction:
            self._conn.execute("ROLLBACK")

    def close(self) -> None:
        try:
            self._conn.close()
        finally:
            os.close(self._lock)  # releases the session lock

    def _execute(self, sql: str, args: Sequence[object]) -> list[tuple[Any, ...]] | int:
        cursor = self._conn.execute(sql, args)
        return cursor.fetchall() if cursor.description is not None else cursor.rowcount

    def _executemany(self, sql: str, rows: Sequence[Sequence[object]]) -> None:
        self._conn.executemany(sql, rows)


@final
class SqliteJournal(StoreJournal[_SqliteStore], metaclass=NoPublicConstructor):
    """A :class:`~trio_tools.DurableJournal` in a SQLite file: one session of it.

    Made by :func:`open_sqlite_journal`.  Every write returns once its transaction
    committed; writes that are queued at the same moment share one transaction (group
    commit).  Besides the journal methods it offers ``history()`` and ``recover()``.
    """

    __slots__ = ("_path", "_session", "_synchronous")

    def __init__(
        self,
        writer: Writer[_SqliteStore],
        path: str,
        session: str,
        synchronous: Literal["normal", "full"],
    ) -> None:
        super().__init__(writer, _describe(path, session))
        self._path = path
        self._session = session
        self._synchronous: Literal["normal", "full"] = synchronous

    def __repr__(self) -> str:
        return f"<trio_tools.SqliteJournal {self._path!r} session={self._session!r}>"

    @property
    def path(self) -> str:
        """The database file."""
        return self._path

    @property
    def session(self) -> str:
        """The session this journal writes."""
        return self._session

    @property
    def synchronous(self) -> Literal["normal", "full"]:
        """The durability level: ``"normal"`` (process crash) or ``"full"`` (power loss)."""
        return self._synchronous


def _describe(path: str, session: str) -> str:
    return f"journal {path!r} (session {session!r})"


def _lock_path(path: str, session: str) -> str:
    digest = hashlib.sha256(session.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{path}-session-{digest}.lock"


def _check_file(path: str) -> None:
    """Refuse a missing directory or a file that is not a SQLite database, untouched."""
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise FileNotFoundError(
            errno.ENOENT,
            f"cannot open journal {path!r}: its directory does not exist (it is not created)",
            directory,
        )
    if os.path.isdir(path):
        raise IsADirectoryError(errno.EISDIR, f"cannot open journal {path!r}: a directory", path)
    try:
        with open(path, "rb") as file:
            header = file.read(len(_HEADER))
    except FileNotFoundError:
        return  # a new journal
    if header and header != _HEADER:
        raise ValueError(f"cannot open journal {path!r}: the file is not a SQLite database")


def _lock_session(path: str, session: str) -> int:
    # Next to the file itself, not to a symlink to it: every name of the file shares a lock.
    lock_path = _lock_path(os.path.realpath(path), session)
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise type(exc)(
            exc.errno,
            f"cannot open journal {path!r}: cannot create the lock file of session "
            f"{session!r}: {exc.strerror}",
            lock_path,
        ) from exc
    try:
        # flock: held per open file, so a second open in this process conflicts too; the
        # kernel drops it when the process dies.
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise RuntimeError(
            f"cannot open journal {path!r}: session {session!r} is already open for "
            "writing (in this or another process)"
        ) from None
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_store(path: str, session: str, synchronous: Literal["normal", "full"]) -> _SqliteStore:
    """Open, check and set up the database; blocking (runs in a worker thread)."""
    _check_file(path)
    lock = _lock_session(path, session)
    conn: sqlite3.Connection | None = None
    try:
        conn = sqlite3.connect(
            path, timeout=_BUSY_TIMEOUT, isolation_level=None, check_same_thread=False
        )
        _check_schema(conn, path)
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if mode != "wal":
            raise RuntimeError(f"cannot open journal {path!r}: WAL mode unavailable ({mode})")
        conn.execute(f"PRAGMA synchronous = {synchronous.upper()}")
        conn.execute("BEGIN IMMEDIATE")
        try:
            _create_schema(conn)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return _SqliteStore(conn, session, lock)
    except sqlite3.DatabaseError as exc:
        if conn is not None:
            conn.close()
        os.close(lock)
        raise _open_error(path, exc) from exc
    except BaseException:
        if conn is not None:
            conn.close()
        os.close(lock)
        raise


def _create_schema(conn: sqlite3.Connection) -> None:
    # executescript would COMMIT the open transaction first: run the statements one by one.
    for statement in _SCHEMA.split(";"):
        if statement.strip():
            conn.execute(statement)


def _check_schema(conn: sqlite3.Connection, path: str) -> None:
    (version,) = conn.execute("PRAGMA user_version").fetchone()
    if version > SCHEMA_VERSION:
        raise ValueError(
            f"cannot open journal {path!r}: its schema version is {version}, newer than "
            f"the {SCHEMA_VERSION} this version of trio_tools reads (upgrade trio_tools)"
        )
    tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master")}
    if version == 0 and tables - _TABLES:
        raise ValueError(
            f"cannot open journal {path!r}: it is a SQLite database of something else "
            "(it has other tables and no journal schema version)"
        )
    if version == SCHEMA_VERSION and not tables >= _TABLES:
        raise ValueError(f"cannot open journal {path!r}: its journal tables are missing")
    (check,) = conn.execute("PRAGMA quick_check(1)").fetchone()
    if check != "ok":
        raise ValueError(f"cannot open journal {path!r}: the database is corrupt ({check})")


def _open_error(path: str, exc: sqlite3.DatabaseError) -> Exception:
    text = str(exc)
    if isinstance(exc, sqlite3.OperationalError) and "unable to open" in text:
        return PermissionError(errno.EACCES, f"cannot open journal {path!r}: {text}", path)
    if "readonly" in text or "read-only" in text:
        return PermissionError(errno.EACCES, f"cannot open journal {path!r}: {text}", path)
    return ValueError(
        f"cannot open journal {path!r}: the database is corrupt or unreadable: {text}"
    )


@contextlib.asynccontextmanager
async def open_sqlite_journal(
    path: str | os.PathLike[str],
    *,
    session: str,
    synchronous: Literal["normal", "full"] = "normal",
) -> AsyncGenerator[SqliteJournal]:
    """Open one session of a SQLite journal file for writing; close it on exit.

    The file is created if it does not exist (its directory is not).  It is opened in WAL
    mode with one connection owned by one writer thread; every write returns only after
    its transaction committed, and writes queued at the same moment share one
    transaction.  ``synchronous="normal"`` survives a crash of the process (even
    ``SIGKILL``); ``"full"`` also syncs every commit to the disk, to survive a power loss
    or an operating-system crash.  Many sessions may share one file; a session may be
    open for writing in one place at a time.

    Raises:
        FileNotFoundError: the file's directory does not exist.
        PermissionError: the file or its directory cannot be written (e.g. read-only).
        ValueError: ``session`` is not a non-empty ``str``, ``synchronous`` is neither
            ``"normal"`` nor ``"full"``; or the file is not a SQLite database, is corrupt,
            belongs to something else, or has a newer schema version.  The file is left
            untouched.
        RuntimeError: the session is already open for writing (in this or another
            process).
    """
    if not isinstance(session, str) or not session:
        raise ValueError(f"session must be a non-empty str, got {session!r}")
    if synchronous not in ("normal", "full"):
        raise ValueError(f"synchronous must be 'normal' or 'full', got {synchronous!r}")
    file = os.fspath(path)
    if not isinstance(file, str):
        raise TypeError(f"path must be a str or os.PathLike[str], got {path!r}")
    store = await trio.to_thread.run_sync(_open_store, file, session, synchronous)
    async with running_writer(
        store,
        name=f"trio_tools journal {session!r}",
        describe=_describe(file, session),
        errors=(sqlite3.Error,),
    ) as writer:
        yield SqliteJournal._create(writer, file, session, synchronous)
