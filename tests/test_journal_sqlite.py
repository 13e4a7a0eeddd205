"""Durable journals: history, recovery, sessions, locks, errors at open, failing writes.

The tests taking ``open_journal`` run once per backend (``conftest.JOURNAL_BACKENDS``: a real
SQLite file in ``tmp_path``, a fresh schema of the suite's own PostgreSQL server); the
others are SQLite's own (``test_journal_postgres.py`` has Postgres's).  The only processes
are the lock holders and the unprivileged opener of the read-only test, each waited for.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from helpers_journal import calls, open_journal_at, registry
from helpers_registry import ok

import trio_tools
from trio_tools import (
    TOOL_ABORTED,
    TOOL_ABORTED_BEFORE_DISPATCH,
    BatchOutcome,
    BatchRecord,
    CancelSource,
    SqliteJournal,
    TextBlock,
    ToolCall,
    ToolRegistry,
    ToolResult,
    ToolRunContext,
    open_sqlite_journal,
    run_tool_calls,
)
from trio_tools._results import aborted

OpenJournal = Callable[[str], AbstractAsyncContextManager[Any]]

SYNTHETIC_ABORTED = aborted(body_invoked=True, synthetic=True)
SYNTHETIC_BEFORE = aborted(body_invoked=False, synthetic=True)


async def run(journal: Any, batch: list[ToolCall]) -> BatchOutcome:
    return await run_tool_calls(registry(), batch, signal=CancelSource().signal, journal=journal)


# -- history and recovery -----------------------------------------------------------------


async def test_history_of_completed_batches(open_journal: OpenJournal) -> None:
    first = calls("c1", "c2")
    second = [*calls("c1"), ToolCall("c9", "missing", "{}")]  # call ids repeat across batches
    async with open_journal("s") as journal:
        out1 = await run(journal, first)
        out2 = await run(journal, second)
        history = await journal.history()
        assert () == await journal.recover()
    assert (
        BatchRecord(
            calls=tuple(first), results=out1.results, dispatched=(True, True), complete=True
        ),
        BatchRecord(
            calls=tuple(second), results=out2.results, dispatched=(True, False), complete=True
        ),
    ) == history
    assert (ok("echo c1"), ok("echo c2")) == out1.results


async def interrupted_batch(journal: Any) -> list[ToolCall]:
    """Write a batch the way a crash leaves it: c0 committed, c1 settled, c2 dispatched."""
    batch = calls("c0", "c1", "c2", "c3")
    await journal.record_batch(batch)
    for call in batch[:3]:
        await journal.record_call(call)
        await journal.record_dispatch(call)
    await journal.record_settled(batch[0], ok("zero"))
    await journal.record_settled(batch[1], ok("one", meta={"rows": 3}))
    await journal.record_result(batch[0], ok("zero"))
    return batch


async def test_recover_classifies_every_uncommitted_call_by_its_dispatch_marker(
    open_journal: OpenJournal,
) -> None:
    async with open_journal("s") as journal:
        batch = await interrupted_batch(journal)
        (before,) = await journal.history()
        assert (ok("zero"), None, None, None) == before.results
        assert (True, True, True, False) == before.dispatched
        assert not before.complete
        recovered = await journal.recover()
        history = await journal.history()
    expected = (ok("zero"), ok("one", meta={"rows": 3}), SYNTHETIC_ABORTED, SYNTHETIC_BEFORE)
    assert (
        BatchOutcome(
            results=expected,
            aborted=True,
            halt=None,
            concludes_turn=False,
            contexts=(),
        ),
    ) == recovered
    assert (
        BatchRecord(
            calls=tuple(batch),
            results=expected,
            dispatched=(True, True, True, False),
            complete=True,
        ),
    ) == history
    assert not recovered[0].results[1].synthetic


async def test_recover_is_idempotent_also_after_reopening(open_journal: OpenJournal) -> None:
    async with open_journal("s") as journal:
        await interrupted_batch(journal)
        first = await journal.recover()
        assert first == await journal.recover()
        history = await journal.history()
        # A later, complete batch is not part of what recovery closed.
        await run(journal, calls("d1"))
    async with open_journal("s") as journal:
        assert first == await journal.recover()
        assert history == (await journal.history())[:1]
        assert 2 == len(await journal.history())


async def test_a_write_for_a_call_outside_the_open_batch_is_refused(
    open_journal: OpenJournal,
) -> None:
    async with open_journal("s") as journal:
        with pytest.raises(ValueError, match="is not a call of the open batch"):
            await journal.record_dispatch(ToolCall("x", "echo", {}))
        await journal.record_batch(calls("c1"))
        with pytest.raises(ValueError, match="is not a call of the open batch"):
            await journal.record_call(ToolCall("c1", "echo", {"other": 1}))
        with pytest.raises(ValueError, match="appears more than once"):
            await journal.record_batch(calls("a", "a"))


async def test_record_batch_refuses_arguments_that_are_not_json(open_journal: OpenJournal) -> None:
    async with open_journal("s") as journal:
        with pytest.raises(ValueError, match=r"ToolCall\.arguments"):
            await journal.record_batch([ToolCall("c1", "echo", {"s": {1, 2}})])
        assert () == await journal.history()


async def test_sessions_share_a_file_and_number_their_batches_apart(
    open_journal: OpenJournal,
) -> None:
    async with (
        open_journal("a") as a,
        open_journal("b") as b,
    ):
        await run(a, calls("a1"))
        await run(b, calls("b1"))
        await run(a, calls("a2"))
        assert [("a1",), ("a2",)] == [tuple(c.call_id for c in r.calls) for r in await a.history()]
        assert [("b1",)] == [tuple(c.call_id for c in r.calls) for r in await b.history()]


async def test_every_result_shape_survives_the_file(open_journal: OpenJournal) -> None:
    result = ToolResult(
        content=[TextBlock("t"), trio_tools.ImageBlock("image/png", "iVBOR")],
        additional_contexts=[trio_tools.AdditionalContext("note", "me")],
        meta=trio_tools._json.freeze({"big": 10**5000, "z": -0.0, "l": [1.5]}),
        halt=trio_tools.Halt("stop"),
        concludes_turn=True,
    )
    async with open_journal("s") as journal:
        (call,) = batch = calls("c1")
        await journal.record_batch(batch)
        await journal.record_settled(call, result)
    async with open_journal("s") as journal:
        (outcome,) = await journal.recover()
    assert (result,) == outcome.results
    assert trio_tools.Halt("stop") == outcome.halt
    assert outcome.concludes_turn


async def test_history_and_recover_checkpoint(open_journal: OpenJournal) -> None:
    async with open_journal("s") as journal:
        with trio.testing.assert_checkpoints():
            await journal.history()
        with trio.testing.assert_checkpoints():
            await journal.recover()


async def test_writes_are_not_interrupted_by_cancellation(open_journal: OpenJournal) -> None:
    async with open_journal("s") as journal:
        batch = calls("c1")
        with trio.CancelScope() as scope:
            scope.cancel()
            await journal.record_batch(batch)
            await journal.record_call(batch[0])
            await journal.record_dispatch(batch[0])
            await journal.record_settled(batch[0], ok("x"))
            await journal.record_result(batch[0], ok("x"))
        assert not scope.cancelled_caught
        (record,) = await journal.history()
        assert (ok("x"),) == record.results


async def test_concurrent_writes_share_transactions(open_journal: OpenJournal) -> None:
    async with open_journal("s") as journal:
        batch = calls(*(f"c{i}" for i in range(50)))
        await journal.record_batch(batch)
        writer = journal._writer
        before = writer.transactions
        async with trio.open_nursery() as nursery:
            for call in batch:
                nursery.start_soon(journal.record_dispatch, call)
        assert writer.transactions - before < 10
        (record,) = await journal.history()
        assert record.dispatched == (True,) * 50


async def test_synchronous_full_and_the_pragmas(tmp_path: Path) -> None:
    async with open_sqlite_journal(tmp_path / "j.db", session="s", synchronous="full") as j:
        assert "full" == j.synchronous
        assert str(tmp_path / "j.db") == j.path
        assert "s" == j.session
        mode = await j._writer.run(lambda s: s._conn.execute("PRAGMA journal_mode").fetchone())
        sync = await j._writer.run(lambda s: s._conn.execute("PRAGMA synchronous").fetchone())
        assert (("wal",), (2,)) == (mode, sync)
        await run(j, calls("c1"))
    with sqlite3.connect(tmp_path / "j.db") as conn:
        assert (1,) == conn.execute("PRAGMA user_version").fetchone()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"session": ""}, "session must be a non-empty str"),
        ({"session": 3}, "session must be a non-empty str"),
        ({"session": "s", "synchronous": "off"}, "synchronous must be 'normal' or 'full'"),
    ],
)
async def test_bad_arguments(tmp_path: Path, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        async with open_sqlite_journal(tmp_path / "j.db", **kwargs):
            pass
    assert [] == listing(tmp_path)


async def test_writes_after_close_are_refused(open_journal: OpenJournal) -> None:
    async with open_journal("s") as journal:
        pass
    with pytest.raises(RuntimeError, match="is closed"):
        await journal.history()


# -- errors at open ---------------------------------------------------------------------


def listing(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def try_open(backend: str, target: str, session: str) -> Exception | None:
    """Open and close the session in a ``trio.run`` of its own; the error, if any."""

    async def main() -> None:
        async with open_journal_at(backend, target, session):
            pass

    try:
        trio.run(main)
    except Exception as exc:
        return exc
    return None


def snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


async def test_a_missing_directory_is_not_created(tmp_path: Path) -> None:
    path = tmp_path / "nope" / "j.db"
    with pytest.raises(FileNotFoundError, match="directory does not exist") as info:
        async with open_sqlite_journal(path, session="s"):
            pass
    assert str(path) in str(info.value)
    assert not (tmp_path / "nope").exists()


async def test_a_file_that_is_not_a_database_is_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    path.write_bytes(b"hello, I am a text file\n" * 10)
    before = snapshot(tmp_path)
    with pytest.raises(ValueError, match="not a SQLite database") as info:
        async with open_sqlite_journal(path, session="s"):
            pass
    assert str(path) in str(info.value)
    assert before == snapshot(tmp_path)


async def test_a_newer_schema_version_is_refused_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    async with open_sqlite_journal(path, session="s") as journal:
        await run(journal, calls("c1"))
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA user_version = 2")
    conn.close()
    before = snapshot(tmp_path)
    with pytest.raises(ValueError, match="schema version is 2, newer than the 1") as info:
        async with open_sqlite_journal(path, session="s"):
            pass
    assert str(path) in str(info.value)
    assert before["j.db"] == snapshot(tmp_path)["j.db"]


async def test_another_applications_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE users (id INTEGER)")
    conn.close()
    with pytest.raises(ValueError, match="a SQLite database of something else"):
        async with open_sqlite_journal(path, session="s"):
            pass


async def test_a_truncated_database_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    async with open_sqlite_journal(path, session="s") as journal:
        for index in range(30):
            await run(journal, calls(*(f"c{index}-{i}" for i in range(10))))
    # Checkpointed into the main file on close; cut it in half.
    size = path.stat().st_size
    assert size > 8192
    with path.open("r+b") as file:
        file.truncate(size // 2)
    with pytest.raises(ValueError, match="corrupt") as info:
        async with open_sqlite_journal(path, session="s"):
            pass
    assert str(path) in str(info.value)


async def test_a_corrupt_database_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    async with open_sqlite_journal(path, session="s") as journal:
        for index in range(30):
            await run(journal, calls(*(f"c{index}-{i}" for i in range(10))))
    data = bytearray(path.read_bytes())
    data[4096 + 100 : 4096 + 4000] = os.urandom(3900)  # garble the second page
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="corrupt") as info:
        async with open_sqlite_journal(path, session="s"):
            pass
    assert str(path) in str(info.value)


async def test_a_session_open_in_this_process_is_refused(open_journal: OpenJournal) -> None:
    async with open_journal("s"):
        with pytest.raises(RuntimeError, match="session 's' is already open for writing"):
            async with open_journal("s"):
                pass
    async with open_journal("s"):
        pass  # free again


async def test_a_session_open_through_a_symlink_to_the_file_is_refused(tmp_path: Path) -> None:
    # Two names of one file are one journal: the lock used to sit next to each name.
    path = tmp_path / "agent.db"
    link = tmp_path / "alias.db"
    link.symlink_to(path.name)
    async with open_sqlite_journal(path, session="s"):
        with pytest.raises(RuntimeError, match="session 's' is already open for writing"):
            async with open_sqlite_journal(link, session="s"):
                pass
        async with open_sqlite_journal(link, session="other"):
            pass  # another session of the same file is fine
    async with open_sqlite_journal(link, session="s"):
        pass  # free again


HOLDER = textwrap.dedent(
    """
    import sys, trio, trio_tools
    open_journal = {
        "sqlite": trio_tools.open_sqlite_journal,
        "postgres": trio_tools.open_postgres_journal,
    }[sys.argv[1]]
    async def main():
        async with open_journal(sys.argv[2], session="s"):
            print("open", flush=True)
            await trio.to_thread.run_sync(sys.stdin.readline)
    trio.run(main)
    """
)


@pytest.mark.slow
def test_a_session_open_in_another_process_is_refused_until_it_ends(
    journal_backend: str, journal_target: Callable[[Path], str], tmp_path: Path
) -> None:
    target = journal_target(tmp_path)
    for ending in ("exit", "kill"):
        with subprocess.Popen(
            [sys.executable, "-c", HOLDER, journal_backend, target],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        ) as proc:
            try:
                assert proc.stdout is not None
                assert proc.stdin is not None
                assert "open\n" == proc.stdout.readline()
                refused = try_open(journal_backend, target, "s")
                assert isinstance(refused, RuntimeError)
                assert "session 's' is already open for writing" in str(refused)
                if journal_backend == "sqlite":
                    assert f"{target!r}: session 's'" in str(refused)
                # Another session of the same journal is free.
                assert try_open(journal_backend, target, "t") is None
                if ending == "exit":
                    proc.stdin.write("\n")
                    proc.stdin.flush()
                else:
                    proc.kill()  # a killed process's lock goes too (kernel, or server)
                proc.wait(10)
            finally:
                if proc.poll() is None:
                    proc.kill()
                proc.wait(10)
        assert try_open(journal_backend, target, "s") is None


OPENER = textwrap.dedent(
    """
    import os, sys, trio, trio_tools
    if os.getuid() == 0:
        os.setgid(65534)
        os.setuid(65534)  # root ignores permissions: drop to nobody
    async def main():
        try:
            async with trio_tools.open_sqlite_journal(sys.argv[1], session="s"):
                print("opened")
        except PermissionError as exc:
            print("PermissionError:", exc)
    trio.run(main)
    """
)


def test_a_read_only_directory_is_a_clear_error() -> None:
    directory = Path(tempfile.mkdtemp(prefix="trio_tools-ro-"))
    try:
        directory.chmod(0o555)
        path = directory / "j.db"
        result = subprocess.run(
            [sys.executable, "-c", OPENER, str(path)],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert result.stdout.startswith("PermissionError: "), (result.stdout, result.stderr)
        assert repr(str(path)) in result.stdout
        assert [] == listing(directory)
    finally:
        directory.chmod(0o755)
        for child in directory.iterdir():
            child.unlink()
        directory.rmdir()


# -- failing writes ---------------------------------------------------------------------


async def fill_up(journal: SqliteJournal) -> None:
    """Make the database full: SQLite's own "database or disk is full" on the next pages."""

    def limit(store: Any) -> None:
        (pages,) = store._conn.execute("PRAGMA page_count").fetchone()
        store._conn.execute(f"PRAGMA max_page_count = {pages}")

    await journal._writer.run(limit)


async def test_a_full_disk_fails_the_write_clearly_and_applies_nothing(tmp_path: Path) -> None:
    async with open_sqlite_journal(tmp_path / "j.db", session="s") as journal:
        await run(journal, calls("c1"))
        before = await journal.history()
        await fill_up(journal)
        big = [ToolCall(f"c{i}", "echo", {"pad": "x" * 20_000}) for i in range(5)]
        with pytest.raises(RuntimeError, match="write failed: database or disk is full") as info:
            await journal.record_batch(big)
        assert "session 's'" in str(info.value)
        assert isinstance(info.value.__cause__, sqlite3.Error)
        # No half-applied batch: the batch row and its calls went together.
        assert before == await journal.history()


async def test_a_full_disk_mid_batch_is_an_internal_failure_that_recovery_closes(
    tmp_path: Path,
) -> None:
    reg = ToolRegistry()

    @reg.tool(concurrency_safe=True)
    async def big(args: object, ctx: ToolRunContext) -> str:
        return "y" * 200_000

    async with open_sqlite_journal(tmp_path / "j.db", session="s") as journal:
        await run(journal, calls("warm"))
        await fill_up(journal)
        with pytest.raises(RuntimeError, match="database or disk is full"):
            await run_tool_calls(
                reg, [ToolCall("c1", "big", {})], signal=CancelSource().signal, journal=journal
            )
        (_, record) = await journal.history()
        assert (True,) == record.dispatched
        assert not record.complete
        (outcome,) = await journal.recover()
        assert TOOL_ABORTED == outcome.results[0].code


async def test_one_failing_write_fails_alone_in_its_group(open_journal: OpenJournal) -> None:
    async with open_journal("s") as journal:
        batch = calls("c1", "c2")
        await journal.record_batch(batch)
        failures: list[BaseException] = []

        async def bad() -> None:
            try:
                await journal._writer.run(lambda store: store.set_dispatched(999, 0))
            except RuntimeError as exc:
                failures.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(journal.record_dispatch, batch[0])
            nursery.start_soon(bad)
            nursery.start_soon(journal.record_dispatch, batch[1])
        assert 1 == len(failures)
        assert "journal row not found" in str(failures[0])
        (record,) = await journal.history()
        assert (True, True) == record.dispatched


async def test_recovered_codes_are_the_two_abort_codes(open_journal: OpenJournal) -> None:
    async with open_journal("s") as journal:
        await interrupted_batch(journal)
        (outcome,) = await journal.recover()
    assert [None, None, TOOL_ABORTED, TOOL_ABORTED_BEFORE_DISPATCH] == [
        r.code for r in outcome.results
    ]
