"""What a journal's database backend provides: a :class:`Store` on one connection.

A backend (SQLite in ``_sqlite.py``, PostgreSQL in ``_postgres.py``) subclasses
:class:`SqlStore`, which holds the SQL both share, and adds its transactions.  A store is
used only by its journal's writer thread (``_writer.py``).

Rows hold the wire forms of calls and results (``to_dict``) as compact JSON text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import attrs

__all__ = ["LIVE", "RECOVERED", "SqlStore", "Store", "StoredBatch", "StoredCall"]

# A batch's state in the store.  Whether it is complete is in its calls: every call has
# a committed result (so concurrent commits never have to agree on which one is last).
LIVE = 0  # written by record_batch (and maybe completed by its own commits)
RECOVERED = 1  # closed by recover()


@attrs.frozen
class StoredCall:
    """One call row as a store returns it: wire JSON text, flags."""

    call: str
    dispatched: bool
    settled: str | None
    committed: bool
    result: str | None  # the committed result when it is not the settled one


@attrs.frozen
class StoredBatch:
    """One batch as a store returns it, its calls in model order."""

    seq: int
    state: int
    calls: tuple[StoredCall, ...]


class Store(Protocol):
    """A backend's synchronous operations on its connection (writer thread only).

    ``seq`` numbers a session's batches from 1; ``position`` is a call's index in its
    batch.  Every method but the transaction ones runs inside a transaction the writer
    opened with :meth:`begin`.
    """

    def begin(self) -> None: ...
    def commit(self) -> None: ...
    def rollback(self) -> None: ...
    def close(self) -> None: ...

    def add_batch(self, calls: Sequence[str]) -> int:
        """Insert a ``LIVE`` batch and its calls (none dispatched or committed); its seq."""
        ...

    def set_dispatched(self, seq: int, position: int) -> None: ...
    def set_settled(self, seq: int, position: int, result: str) -> None: ...

    def set_committed(self, seq: int, position: int, result: str | None) -> None:
        """Commit a call's result: ``None`` means the settled one (already stored)."""
        ...

    def set_recovered(self, seq: int) -> None:
        """Mark the batch as closed by recovery."""
        ...

    def batches(self) -> list[StoredBatch]:
        """Every batch of the session, in seq order."""
        ...


class SqlStore:
    """The :class:`Store` operations in SQL, shared by the database backends.

    A backend subclass provides the transaction methods, ``close`` and :meth:`_execute`
    (one statement with ``?`` placeholders; returns the rows, or the row count of a
    statement without rows); the tables are ``trio_tools_batches`` and
    ``trio_tools_calls`` in both.  Booleans are written as ``TRUE`` and read with
    ``bool()``, which fits SQLite's integers and PostgreSQL's booleans alike.
    """

    __slots__ = ("_session",)

    def __init__(self, session: str) -> None:
        self._session = session

    def _execute(self, sql: str, args: Sequence[object]) -> list[tuple[Any, ...]] | int:
        raise NotImplementedError

    def _executemany(self, sql: str, rows: Sequence[Sequence[object]]) -> None:
        for row in rows:
            self._execute(sql, row)

    def _rows(self, sql: str, *args: object) -> list[tuple[Any, ...]]:
        rows = self._execute(sql, args)
        assert isinstance(rows, list), "a query returns rows"
        return rows

    def _update(self, sql: str, *args: object) -> None:
        if self._execute(sql, args) != 1:
            raise RuntimeError(f"journal row not found for {args[-2:]!r}")

    def add_batch(self, calls: Sequence[str]) -> int:
        session = self._session
        ((last,),) = self._rows(
            "SELECT COALESCE(MAX(seq), 0) FROM trio_tools_batches WHERE session = ?", session
        )
        seq = int(last) + 1
        self._execute(
            "INSERT INTO trio_tools_batches (session, seq, state) VALUES (?, ?, ?)",
            (session, seq, LIVE),
        )
        self._executemany(
            "INSERT INTO trio_tools_calls (session, seq, position, call) VALUES (?, ?, ?, ?)",
            [(session, seq, position, call) for position, call in enumerate(calls)],
        )
        return seq

    def set_dispatched(self, seq: int, position: int) -> None:
        self._update(
            "UPDATE trio_tools_calls SET dispatched = TRUE"
            " WHERE session = ? AND seq = ? AND position = ?",
            self._session,
            seq,
            position,
        )

    def set_settled(self, seq: int, position: int, result: str) -> None:
        self._update(
            "UPDATE trio_tools_calls SET settled = ?"
            " WHERE session = ? AND seq = ? AND position = ?",
            result,
            self._session,
            seq,
            position,
        )

    def set_committed(self, seq: int, position: int, result: str | None) -> None:
        self._update(
            "UPDATE trio_tools_calls SET committed = TRUE, result = ?"
            " WHERE session = ? AND seq = ? AND position = ?",
            result,
            self._session,
            seq,
            position,
        )

    def set_recovered(self, seq: int) -> None:
        self._update(
            "UPDATE trio_tools_batches SET state = ? WHERE session = ? AND seq = ?",
            RECOVERED,
            self._session,
            seq,
        )

    def batches(self) -> list[StoredBatch]:
        calls: dict[int, list[StoredCall]] = {}
        for seq, call, dispatched, settled, committed, result in self._rows(
            "SELECT seq, call, dispatched, settled, committed, result FROM trio_tools_calls"
            " WHERE session = ? ORDER BY seq, position",
            self._session,
        ):
            calls.setdefault(seq, []).append(
                StoredCall(call, bool(dispatched), settled, bool(committed), result)
            )
        return [
            StoredBatch(seq, state, tuple(calls.get(seq, ())))
            for seq, state in self._rows(
                "SELECT seq, state FROM trio_tools_batches WHERE session = ? ORDER BY seq",
                self._session,
            )
        ]
