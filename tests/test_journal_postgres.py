"""The Postgres journal's own behaviour: the optional import, the schema and its migrations,
the session lock's scope, a lost connection, and two workers sharing a database.

The journal behaviour every backend shares runs in ``test_journal_sqlite.py`` and the crash
suite in ``test_journal_crash.py``, both parametrized over the backends.  Everything here
talks to the suite's own PostgreSQL server (``conftest.postgres_server``); the processes
started are waited for.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any

import psycopg
import pytest
import trio
from helpers_journal import calls, registry
from helpers_registry import ok
from pg_server import PostgresServer, free_port

from trio_tools import (
    TOOL_ABORTED,
    CancelSource,
    PostgresJournal,
    ToolCall,
    ToolRegistry,
    ToolRunContext,
    _postgres,
    open_postgres_journal,
    run_tool_calls,
)

TIMEOUT = 60.0


@pytest.fixture
def database(postgres_server: PostgresServer) -> str:
    """A conninfo using a fresh schema (the journal's tables are per schema)."""
    return postgres_server.create_schema()


def query(conninfo: str, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(conninfo, autocommit=True) as conn:
        cursor = conn.execute(sql.encode(), args)
        return cursor.fetchall() if cursor.description is not None else []


def python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


# -- the optional dependency ----------------------------------------------------------------


def test_importing_trio_tools_does_not_import_psycopg() -> None:
    result = python(
        """
        import sys, trio_tools
        trio_tools.open_postgres_journal, trio_tools.PostgresJournal
        print(sorted(m for m in sys.modules if m.split(".")[0] == "psycopg"))
        """
    )
    assert "[]\n" == result.stdout, result.stderr


def test_a_missing_psycopg_names_the_extra() -> None:
    result = python(
        """
        import sys, trio, trio_tools
        sys.modules["psycopg"] = None  # as if it were not installed
        async def main():
            async with trio_tools.open_postgres_journal("dbname=x", session="s"):
                pass
        try:
            trio.run(main)
        except ImportError as exc:
            print(exc)
        """
    )
    assert "pip install 'trio_tools[postgres]'" in result.stdout, (result.stdout, result.stderr)


# -- opening ---------------------------------------------------------------------------------


async def test_repr_session_and_the_schema_version(database: str) -> None:
    async with open_postgres_journal(database, session="agent-1") as journal:
        assert isinstance(journal, PostgresJournal)
        assert "agent-1" == journal.session
        assert repr(journal).startswith("<trio_tools.PostgresJournal postgres@127.0.0.1:")
        assert "session='agent-1'" in repr(journal)
    assert [(_postgres.SCHEMA_VERSION,)] == query(
        database, "SELECT version FROM trio_tools_journal_schema"
    )


async def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="session must be a non-empty str"):
        async with open_postgres_journal("dbname=x", session=""):
            pass
    with pytest.raises(ValueError, match="conninfo is not a libpq connection string") as info:
        async with open_postgres_journal("host=x password=sekrit nonsense", session="s"):
            pass
    assert "sekrit" not in str(info.value)
    with pytest.raises(TypeError, match="conninfo must be a str, got bytes"):
        async with open_postgres_journal(b"dbname=x", session="s"):  # type: ignore[arg-type]
            pass


async def test_an_unreachable_server_is_a_connection_error_without_the_password() -> None:
    conninfo = f"host=127.0.0.1 port={free_port()} dbname=fleet user=u password=sekrit"
    with pytest.raises(ConnectionError, match=r"cannot open journal fleet@127\.0\.0\.1") as info:
        async with open_postgres_journal(conninfo, session="s"):
            pass
    assert "sekrit" not in str(info.value)
    assert isinstance(info.value.__cause__, psycopg.OperationalError)


async def test_an_older_schema_is_migrated_and_keeps_its_rows(
    database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A database written by a version of the library that knew schema 1 only.
    with monkeypatch.context() as patch:
        patch.setattr(_postgres, "SCHEMA_VERSION", 1)
        async with open_postgres_journal(database, session="s") as journal:
            old = await run_tool_calls(
                registry(), calls("c1", "c2"), signal=CancelSource().signal, journal=journal
            )
        assert [(1,)] == query(database, "SELECT version FROM trio_tools_journal_schema")
    foreign_key = (
        "SELECT count(*) FROM pg_constraint WHERE conname = 'trio_tools_calls_batch'"
        " AND connamespace = current_schema()::regnamespace"
    )
    assert [(0,)] == query(database, foreign_key)
    async with open_postgres_journal(database, session="s") as journal:
        (record,) = await journal.history()
    assert old.results == record.results
    assert [(2,)] == query(database, "SELECT version FROM trio_tools_journal_schema")
    assert [(1,)] == query(database, foreign_key)


async def test_a_newer_schema_version_is_refused_and_left_untouched(database: str) -> None:
    async with open_postgres_journal(database, session="s") as journal:
        await journal.record_batch(calls("c1"))
    query(database, "UPDATE trio_tools_journal_schema SET version = 99")
    before = query(database, "SELECT * FROM trio_tools_calls")
    with pytest.raises(ValueError, match="schema version is 99, newer than the 2") as info:
        async with open_postgres_journal(database, session="s"):
            pass
    assert "cannot open journal postgres@127.0.0.1:" in str(info.value)
    assert before == query(database, "SELECT * FROM trio_tools_calls")
    assert [(99,)] == query(database, "SELECT version FROM trio_tools_journal_schema")


async def test_concurrent_first_opens_of_a_database_migrate_it_once(database: str) -> None:
    async def open_one(session: str) -> None:
        async with open_postgres_journal(database, session=session) as journal:
            await journal.record_batch(calls("c1"))

    async with trio.open_nursery() as nursery:
        for index in range(4):
            nursery.start_soon(open_one, f"s{index}")
    assert [(4,)] == query(database, "SELECT count(*) FROM trio_tools_batches")


# -- the session lock ------------------------------------------------------------------------


async def test_the_lock_and_the_tables_are_per_schema(postgres_server: PostgresServer) -> None:
    one, other = postgres_server.create_schema(), postgres_server.create_schema()
    async with (
        open_postgres_journal(one, session="s") as first,
        open_postgres_journal(other, session="s") as second,
    ):
        await first.record_batch(calls("p"))
        await second.record_batch(calls("o"))
        assert ["p"] == [c.call_id for r in await first.history() for c in r.calls]
        assert ["o"] == [c.call_id for r in await second.history() for c in r.calls]


# -- a lost connection -----------------------------------------------------------------------


async def backend_pid(journal: PostgresJournal) -> int:
    return await journal._writer.run(lambda store: store._conn.info.backend_pid)


def terminate(server: PostgresServer, pid: int) -> None:
    """Kill the server process of a connection, waiting until it is gone."""
    ((done,),) = query(server.conninfo, "SELECT pg_terminate_backend(%s, 10000)", pid)
    assert done


async def test_a_connection_lost_mid_batch_is_the_batchs_internal_failure(
    database: str, postgres_server: PostgresServer
) -> None:
    reg = ToolRegistry()
    pids: list[int] = []

    @reg.tool(concurrency_safe=True)
    async def cut(args: object, ctx: ToolRunContext) -> str:
        await trio.to_thread.run_sync(terminate, postgres_server, pids[0])
        return "cut"

    async with open_postgres_journal(database, session="s") as journal:
        await run_tool_calls(reg, calls("warm"), signal=CancelSource().signal, journal=journal)
        pids.append(await backend_pid(journal))
        with pytest.raises(RuntimeError, match=r"session 's'.*write failed") as info:
            await run_tool_calls(
                reg, [ToolCall("c1", "cut", {})], signal=CancelSource().signal, journal=journal
            )
        assert isinstance(info.value.__cause__, psycopg.OperationalError)
        # Every later write fails clearly, too: the connection (and its lock) are gone.
        with pytest.raises(RuntimeError, match="connection to the server was lost"):
            await journal.history()
    # A later open works again, and finds the batch as the failure left it.
    async with open_postgres_journal(database, session="s") as journal:
        (_, record) = await journal.history()
        assert (True,) == record.dispatched
        assert not record.complete
        (outcome,) = await journal.recover()
        assert TOOL_ABORTED == outcome.results[0].code


async def test_a_connection_lost_inside_a_transaction_applies_nothing_of_it(
    database: str, postgres_server: PostgresServer
) -> None:
    async with open_postgres_journal(database, session="s") as journal:
        await journal.record_batch(calls("c1"))
        await journal.record_settled(calls("c1")[0], ok("one"))
        pid = await backend_pid(journal)

        def half(store: Any) -> None:
            store.add_batch(['{"v":1}'])  # written, not committed...
            terminate(postgres_server, pid)  # ...when the connection dies

        with pytest.raises(RuntimeError, match="write failed"):
            await journal._writer.run(half)
    async with open_postgres_journal(database, session="s") as journal:
        (record,) = await journal.history()
    assert (None,) == record.results
    assert [(1,)] == query(database, "SELECT count(*) FROM trio_tools_batches")
    assert [(1,)] == query(database, "SELECT count(*) FROM trio_tools_calls")


# -- a fleet ---------------------------------------------------------------------------------

WORKER = """
import sys, time, trio, trio_tools
registry = trio_tools.ToolRegistry()
@registry.tool(concurrency_safe=True)
async def echo(args: object, ctx: trio_tools.ToolRunContext) -> str:
    return ctx.call_id
async def main():
    conninfo, session = sys.argv[1], sys.argv[2]
    async with trio_tools.open_postgres_journal(conninfo, session=session) as journal:
        start = time.time()
        for batch in range(10):
            calls = [trio_tools.ToolCall(f"{session}-{batch}-{i}", "echo", {}) for i in range(100)]
            outcome = await trio_tools.run_tool_calls(
                registry, calls, signal=trio_tools.CancelSource().signal, journal=journal
            )
            assert all(r.code is None for r in outcome.results), outcome
        end = time.time()
    print(start, end, flush=True)
trio.run(main)
"""


@pytest.mark.slow
async def test_two_worker_processes_share_a_database_with_sessions_of_their_own(
    database: str,
) -> None:
    async def worker(session: str) -> subprocess.CompletedProcess[bytes]:
        with trio.fail_after(TIMEOUT):
            return await trio.run_process(
                [sys.executable, "-c", textwrap.dedent(WORKER), database, session],
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )

    results: dict[str, subprocess.CompletedProcess[bytes]] = {}
    spans: dict[str, tuple[float, float]] = {}

    async def run_worker(session: str) -> None:
        results[session] = await worker(session)

    async with trio.open_nursery() as nursery:
        for session in ("worker-1", "worker-2"):
            nursery.start_soon(run_worker, session)
    for session, result in results.items():
        assert (0, b"") == (result.returncode, result.stderr), session
        start, end = result.stdout.decode().split()
        spans[session] = (float(start), float(end))
        async with open_postgres_journal(database, session=session) as journal:
            history = await journal.history()
            assert () == await journal.recover()
        assert 10 == len(history)
        assert all(record.complete for record in history)
        results_ = [result for record in history for result in record.results]
        assert 1_000 == len(results_)
        assert [ok(f"{session}-{batch}-{i}") for batch in range(10) for i in range(100)] == results_
    # They wrote at the same time: each opened its session before the other finished.
    (start1, end1), (start2, end2) = (spans[s] for s in ("worker-1", "worker-2"))
    assert start1 < end2
    assert start2 < end1
