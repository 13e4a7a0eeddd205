"""The PostgreSQL durable journal: :func:`open_postgres_journal` and :class:`PostgresJournal`.

psycopg 3's synchronous API on one connection owned by one writer thread (see
``_writer.Writer``; psycopg's async API needs asyncio and does not run on Trio), group
commit, a session-level advisory lock per session, and a versioned schema migrated at open.
psycopg is imported only when a journal is opened.
"""

# the package's modules share underscore helpers with each other:
# pyright: reportPrivateUsage=false
# run-time validation of values from untyped callers:
# pyright: reportUnnecessaryIsInstance=false

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import AsyncGenerator, Sequence
from typing import TYPE_CHECKING, Any, final

import trio

from ._journal import StoreJournal
from ._store import LIVE, RECOVERED, SqlStore
from ._util import NoPublicConstructor
from ._writer import Writer, running_writer

if TYPE_CHECKING:
    import psycopg

__all__ = ["SCHEMA_VERSION", "PostgresJournal", "open_postgres_journal"]

SCHEMA_VERSION = 2
"""The journal schema this version of the library writes and reads."""

# _MIGRATIONS[v] takes a database from schema version v to v + 1, in the transaction that
# holds the migration lock.  Version 0 is a database without the journal's tables.  Rows hold
# wire forms as TEXT, not JSONB: JSONB would reorder keys and lose -0.0 and big integers.
_MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        "CREATE TABLE trio_tools_journal_schema (version INTEGER NOT NULL)",
        "INSERT INTO trio_tools_journal_schema (version) VALUES (0)",
        "CREATE TABLE trio_tools_batches ("
        " session TEXT NOT NULL,"
        " seq BIGINT NOT NULL,"
        " state SMALLINT NOT NULL,"  # 0 (LIVE): written by its batch, 1 (RECOVERED): recovered
        " PRIMARY KEY (session, seq))",
        "CREATE TABLE trio_tools_calls ("
        " session TEXT NOT NULL,"
        " seq BIGINT NOT NULL,"
        " position INTEGER NOT NULL,"
        " call TEXT NOT NULL,"  # the ToolCall wire form, JSON
        " dispatched BOOLEAN NOT NULL DEFAULT FALSE,"  # the write-ahead dispatch marker
        " settled TEXT,"  # the ToolResult wire form published for the call
        " committed BOOLEAN NOT NULL DEFAULT FALSE,"
        " result TEXT,"  # the committed result when it is not the settled one
        " PRIMARY KEY (session, seq, position))",
    ),
    (
        # A call row belongs to its batch row: deleting a session's batches (housekeeping)
        # takes their calls along, and no call row can outlive its batch.
        "ALTER TABLE trio_tools_calls ADD CONSTRAINT trio_tools_calls_batch"
        " FOREIGN KEY (session, seq) REFERENCES trio_tools_batches (session, seq)"
        " ON DELETE CASCADE",
    ),
)
assert len(_MIGRATIONS) == SCHEMA_VERSION
assert (LIVE, RECOVERED) == (0, 1), "the schema comment above names the states"


def _lock_key(name: str) -> int:
    """A 64-bit advisory lock key for ``name``."""
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


# The advisory lock that serializes migrations (concurrent first opens of one database).
_MIGRATION_LOCK = _lock_key("trio_tools journal schema")
_CONNECT_TIMEOUT = 10  # seconds, unless the conninfo says otherwise
_LOCK_GRACE = 2.0  # seconds an open waits for a session lock held by another connection


class _PostgresStore(SqlStore):
    """The journal's operations on one psycopg connection (writer thread only)."""

    __slots__ = ("_conn", "_sql")

    def __init__(self, conn: psycopg.Connection[Any], session: str) -> None:
        super().__init__(session)
        self._conn = conn
        self._sql: dict[str, bytes] = {}

    def begin(self) -> None:
        if self._conn.broken or self._conn.closed:
            import psycopg

            raise psycopg.OperationalError(
                "the connection to the server was lost (and with it the session lock): "
                "close the journal and open it again"
            )
        self._conn.execute("BEGIN")

    def commit(self) -> None:
        self._conn.execute("COMMIT")

    def rollback(self) -> None:
        self._conn.execute("ROLLBACK")

    def close(self) -> None:
        import psycopg

        try:
            # Released now, not when the server gets round to ending the session: a reopen
            # right after the close finds the session free.  A dead connection has no lock.
            with contextlib.suppress(psycopg.Error):
                self._conn.execute("SELECT pg_advisory_unlock_all()")
        finally:
            self._conn.close()

    def _statement(self, sql: str) -> bytes:
        statement = self._sql.get(sql)
        if statement is None:
            # The shared statements use `?`; psycopg's placeholder is `%s`.  bytes: psycopg
            # types a str query as LiteralString (these are the shared SqlStore constants).
            statement = self._sql[sql] = sql.replace("?", "%s").encode()
        return statement

    def _execute(self, sql: str, args: Sequence[object]) -> list[tuple[Any, ...]] | int:
        cursor = self._conn.execute(self._statement(sql), args, prepare=True)
        return cursor.fetchall() if cursor.description is not None else cursor.rowcount

    def _executemany(self, sql: str, rows: Sequence[Sequence[object]]) -> None:
        with self._conn.cursor() as cursor:
            cursor.executemany(self._statement(sql), rows)


@final
class PostgresJournal(StoreJournal[_PostgresStore], metaclass=NoPublicConstructor):
    """A :class:`~trio_tools.DurableJournal` in a PostgreSQL database: one session of it.

    Made by :func:`open_postgres_journal`.  Every write returns once its transaction
    committed; writes that are queued at the same moment share one transaction (group
    commit).  Besides the journal methods it offers ``history()`` and ``recover()``.
    """

    __slots__ = ("_session", "_where")

    def __init__(self, writer: Writer[_PostgresStore], where: str, session: str) -> None:
        super().__init__(writer, _describe(where, session))
        self._where = where
        self._session = session

    def __repr__(self) -> str:
        return f"<trio_tools.PostgresJournal {self._where} session={self._session!r}>"

    @property
    def session(self) -> str:
        """The session this journal writes."""
        return self._session


def _describe(where: str, session: str) -> str:
    return f"Postgres journal {where} (session {session!r})"


def _where(params: dict[str, Any]) -> str:
    """The database of a parsed conninfo for messages: never its password."""
    dbname = params.get("dbname") or params.get("user") or "(default database)"
    host = params.get("host") or "(default host)"
    port = params.get("port")
    return f"{dbname!s}@{host!s}" + (f":{port!s}" if port else "")


def _session_lock(schema: str, session: str) -> int:
    """The advisory lock key of a session (in the schema holding its tables)."""
    return _lock_key(f"trio_tools journal\0{schema}\0{session}")


def _lock_session(conn: psycopg.Connection[Any], key: int, where: str, session: str) -> None:
    """Take the session's advisory lock, waiting at most ``_LOCK_GRACE`` for it."""
    import psycopg

    # A killed writer's server process releases the lock only once it has seen the
    # connection close and exited, a moment after the kill: a restarted worker waits for
    # that moment instead of being refused.
    conn.execute("SELECT set_config('lock_timeout', %s, false)", (f"{int(_LOCK_GRACE * 1000)}ms",))
    try:
        conn.execute("SELECT pg_advisory_lock(%s)", (key,))
    except psycopg.errors.LockNotAvailable:
        raise RuntimeError(
            f"cannot open journal {where}: session {session!r} is already open for "
            "writing (in this or another process)"
        ) from None
    finally:
        conn.execute("SELECT set_config('lock_timeout', '0', false)")


def _migrate(conn: psycopg.Connection[Any], where: str) -> None:
    """Bring the journal's tables to ``SCHEMA_VERSION``; refuse a newer schema."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
        row = conn.execute("SELECT to_regclass('trio_tools_journal_schema') IS NOT NULL").fetchone()
        version = 0
        if row is not None and row[0]:
            versions = conn.execute("SELECT version FROM trio_tools_journal_schema").fetchall()
            if len(versions) != 1:
                raise ValueError(
                    f"cannot open journal {where}: its table trio_tools_journal_schema holds "
                    f"{len(versions)} rows, not one"
                )
            version = int(versions[0][0])
        if version > SCHEMA_VERSION:
            raise ValueError(
                f"cannot open journal {where}: its schema version is {version}, newer than "
                f"the {SCHEMA_VERSION} this version of trio_tools reads (upgrade trio_tools)"
            )
        for step in range(version, SCHEMA_VERSION):
            for statement in _MIGRATIONS[step]:
                # bytes: psycopg types a str query as LiteralString (no injection here: the
                # statements are this module's constants).
                conn.execute(statement.encode())
        if version < SCHEMA_VERSION:
            conn.execute("UPDATE trio_tools_journal_schema SET version = %s", (SCHEMA_VERSION,))


def _open_store(conninfo: str, params: dict[str, Any], session: str) -> tuple[_PostgresStore, str]:
    """Connect, lock the session and migrate the schema; blocking (a worker thread)."""
    import psycopg

    where = _where(params)
    timeout: dict[str, Any] = {}
    if "connect_timeout" not in params:
        timeout["connect_timeout"] = _CONNECT_TIMEOUT
    try:
        conn = psycopg.connect(conninfo, autocommit=True, **timeout)
    except psycopg.Error as exc:
        raise ConnectionError(f"cannot open journal {where}: {exc}".rstrip()) from exc
    try:
        row = conn.execute("SELECT current_schema()").fetchone()
        schema = "" if row is None or row[0] is None else str(row[0])
        _lock_session(conn, _session_lock(schema, session), where, session)
        _migrate(conn, where)
        return _PostgresStore(conn, session), where
    except psycopg.Error as exc:
        conn.close()
        raise RuntimeError(f"cannot open journal {where}: {exc}".rstrip()) from exc
    except BaseException:
        conn.close()
        raise


@contextlib.asynccontextmanager
async def open_postgres_journal(conninfo: str, *, session: str) -> AsyncGenerator[PostgresJournal]:
    """Open one session of a PostgreSQL journal for writing; close it on exit.

    ``conninfo`` is a libpq connection string or URL (``"postgresql://user@host/db"``,
    ``"host=... dbname=..."``).  The journal's tables are created in the connection's
    current schema if they do not exist, and migrated if they are of an older schema
    version.  One connection, owned by one writer thread, holds a session-level advisory
    lock on the session for as long as the journal is open; every write returns only after
    its transaction committed, and writes queued at the same moment share one transaction.
    Many sessions (many worker processes) may share one database; a session may be open for
    writing in one place at a time.  If the connection is lost, each write fails with a
    ``RuntimeError`` (nothing of its transaction applied); close the journal and open it
    again.

    Raises:
        ImportError: psycopg is not installed (``pip install 'trio_tools[postgres]'``).
        ValueError: ``session`` is not a non-empty ``str``, ``conninfo`` cannot be parsed;
            or the database holds a newer journal schema version.
        TypeError: ``conninfo`` is not a ``str``.
        ConnectionError: the server cannot be reached or refuses the connection.
        RuntimeError: the session is already open for writing (in this or another
            process); or setting up the tables failed.
    """
    if not isinstance(conninfo, str):
        # Not repeated in the message: a conninfo may hold a password.
        raise TypeError(f"conninfo must be a str, got {type(conninfo).__name__}")
    if not isinstance(session, str) or not session:
        raise ValueError(f"session must be a non-empty str, got {session!r}")
    try:
        import psycopg
    except ImportError as exc:
        raise ImportError(
            "open_postgres_journal needs psycopg 3: pip install 'trio_tools[postgres]'"
        ) from exc
    from psycopg.conninfo import conninfo_to_dict

    try:
        params = conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError:
        raise ValueError(
            "conninfo is not a libpq connection string or URL (it is not repeated here: it "
            "may hold a password)"
        ) from None
    store, where = await trio.to_thread.run_sync(_open_store, conninfo, params, session)
    async with running_writer(
        store,
        name=f"trio_tools Postgres journal {session!r}",
        describe=_describe(where, session),
        errors=(psycopg.Error,),
    ) as writer:
        yield PostgresJournal._create(writer, where, session)
