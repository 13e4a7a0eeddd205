"""Accepted: both durable journals are ``DurableJournal``s, with their own properties."""

from __future__ import annotations

import trio_tools
from trio_tools import BatchOutcome, BatchRecord, DurableJournal


async def use(journal: DurableJournal, calls: list[trio_tools.ToolCall]) -> None:
    await journal.record_batch(tuple(calls))


async def both(path: str, conninfo: str) -> None:
    async with (
        trio_tools.open_sqlite_journal(path, session="a") as sqlite,
        trio_tools.open_postgres_journal(conninfo, session="a") as postgres,
    ):
        await use(sqlite, [])
        await use(postgres, [])
        history: tuple[BatchRecord, ...] = await postgres.history()
        outcomes: tuple[BatchOutcome, ...] = await postgres.recover()
        session: str = postgres.session
        pg: trio_tools.PostgresJournal = postgres
        del history, outcomes, session, pg
