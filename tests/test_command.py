"""run_command: a command's whole process group is stopped and awaited when the call ends.

These tests start real processes and use the real clock (a process does not follow a
virtual one).  They never sleep and hope: they wait for the process tree they expect to
appear in ``/proc`` (bounded by ``fail_after``), or for the Trio tasks to block.  After each
one, no process of the command's group is running and the command's own process was reaped
(checked in ``/proc``).  A zombie whose parent is not us may remain: a grandchild whose
parent died first is re-parented to PID 1, and reaping it is PID 1's job (this machine's
PID 1 never does).
"""

# the tests reach into the module to run its non-Linux path:
# pyright: reportPrivateUsage=false

from __future__ import annotations

import errno
import os
import shlex
import signal
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from helpers_registry import aborted, error, ok

import trio_tools
from trio_tools import (
    AdditionalContext,
    CancelSource,
    CommandResult,
    ToolExecutionInput,
    ToolRegistry,
    ToolResult,
    ToolRunContext,
    run_command,
)
from trio_tools import _command as command_module

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc")

ME = os.getpid()
Body = Callable[[ToolRunContext], Awaitable[object]]


@attrs.frozen
class Proc:
    pid: int
    comm: str
    state: str
    ppid: int
    pgrp: int
    session: int

    @property
    def running(self) -> bool:
        return self.state not in ("Z", "X")


def processes() -> list[Proc]:
    """Every process in /proc, read once."""
    found: list[Proc] = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            raw = Path(f"/proc/{name}/stat").read_bytes().decode(errors="replace")
        except OSError:
            continue
        comm = raw[raw.index("(") + 1 : raw.rindex(")")]
        state, ppid, pgrp, session = raw[raw.rindex(")") + 2 :].split()[:4]
        found.append(Proc(int(name), comm, state, int(ppid), int(pgrp), int(session)))
    return found


def group(pgid: int) -> list[Proc]:
    return [proc for proc in processes() if proc.pgrp == pgid]


def assert_group_gone(pgid: int) -> None:
    """Nothing of the group runs, and run_command reaped its own child."""
    members = group(pgid)
    assert [] == [proc for proc in members if proc.running]
    assert [] == [proc for proc in members if proc.ppid == ME]


async def poll_until(predicate: Callable[[], bool]) -> None:
    """Wait (10 s at most) for another process's progress, which Trio cannot wait on."""
    with trio.fail_after(10):
        while True:
            if predicate():
                return
            await trio.sleep(0.005)


async def wait_for_group(comm: str) -> list[Proc]:
    """The group of a command we started, once a running member is called ``comm``."""
    found: list[Proc] = []

    def look() -> bool:
        for leader in processes():
            if leader.ppid == ME and leader.session == leader.pid:
                found[:] = group(leader.pid)
                if any(proc.comm == comm and proc.running for proc in found):
                    return True
        return False

    await poll_until(look)
    return found


@pytest.fixture(autouse=True)
def no_child_is_left() -> Iterator[None]:
    """After every test: each command we started was reaped (and so is not running)."""
    yield
    assert [] == [proc for proc in processes() if proc.ppid == ME]


@attrs.define
class Call:
    """One tool call running in the background; ``result`` once it is done."""

    source: CancelSource
    done: trio.Event
    result: ToolResult | None = None


@pytest.fixture
async def nursery() -> AsyncIterator[trio.Nursery]:
    async with trio.open_nursery() as nursery:
        yield nursery


def registry_with(body: Body, *, timeout: float | None = None) -> ToolRegistry:
    registry = ToolRegistry()

    async def shell(args: object, ctx: ToolRunContext) -> object:
        return await body(ctx)

    registry.register(trio_tools.define_tool(shell, name="shell", timeout=timeout))
    registry.add_around_execute(trio_tools.timeout_policy())
    return registry


def start_call(nursery: trio.Nursery, registry: ToolRegistry) -> Call:
    call = Call(CancelSource(), trio.Event())

    async def run() -> None:
        call.result = await registry.execute(
            ToolExecutionInput(call_id="c1", name="shell", arguments={}, signal=call.source.signal)
        )
        call.done.set()

    nursery.start_soon(run)
    return call


async def finished(call: Call) -> ToolResult:
    with trio.fail_after(10):
        await call.done.wait()
    assert call.result is not None
    return call.result


def checked(argv: list[str], **options: Any) -> Body:
    """A body in the ``check=True`` style: a non-zero exit is the tool's failure."""

    async def body(ctx: ToolRunContext) -> str:
        result = await run_command(argv, ctx=ctx, **options)
        if result.returncode != 0:
            raise RuntimeError(f"exit status {result.returncode}")
        return result.stdout

    return body


def stopped(command: str, why: str, how: str, *sections: str) -> AdditionalContext:
    lines = [f"$ {command}", f"[stopped before it finished: {why}; {how}]"]
    lines += sections or ["[no output]"]
    return AdditionalContext("\n".join(lines), source="run_command")


# -- what a finished command gives back -----------------------------------------------------


@pytest.mark.slow
async def test_result_holds_exit_status_and_both_streams() -> None:
    result = await run_command(["bash", "-c", "echo out; echo err >&2; exit 3"])
    assert CommandResult(returncode=3, stdout="out\n", stderr="err\n") == result


@pytest.mark.slow
async def test_shell_runs_the_string_with_bin_sh(tmp_path: Path) -> None:
    result = await run_command('echo "$0" && pwd', shell=True, cwd=tmp_path)
    assert CommandResult(returncode=0, stdout=f"/bin/sh\n{tmp_path}\n", stderr="") == result


@pytest.mark.slow
async def test_input_is_written_to_stdin_and_env_replaces_the_environment() -> None:
    result = await run_command(
        ["/bin/sh", "-c", 'cat; echo "[$GREETING]"; echo "[$HOME]"'],
        input="héllo\n",
        env={"GREETING": "hi"},
    )
    assert CommandResult(returncode=0, stdout="héllo\n[hi]\n[]\n", stderr="") == result


@pytest.mark.slow
async def test_stdin_is_dev_null_without_input() -> None:
    """A command reading stdin never waits on the terminal (nor steals a prompt's input)."""
    with trio.fail_after(10):
        result = await run_command(["cat"])
    assert CommandResult(returncode=0, stdout="", stderr="") == result


@pytest.mark.slow
async def test_output_flood_keeps_head_and_tail() -> None:
    full = "".join(f"{n}\n" for n in range(1, 300_001)).encode()
    result = await run_command(["seq", "1", "300000"], max_output=1000)
    omitted = len(full) - 1000
    kept = f"{full[:500].decode()}\n[... {omitted} bytes omitted ...]\n{full[-500:].decode()}"
    assert CommandResult(returncode=0, stdout=kept, stderr="", truncated=True) == result


@pytest.mark.slow
async def test_output_within_max_output_is_kept_whole() -> None:
    result = await run_command(["printf", "0123456789"], max_output=10)
    assert CommandResult(returncode=0, stdout="0123456789", stderr="") == result


@pytest.mark.slow
async def test_processes_left_behind_by_a_finished_command_are_stopped() -> None:
    started = time.monotonic()
    with trio.fail_after(10):
        result = await run_command(["bash", "-c", "echo $$; sleep 30 & echo started"])
    assert time.monotonic() - started < 5  # SIGTERM sufficed: no grace period waited out
    pgid = int(result.stdout.split()[0])
    assert CommandResult(returncode=0, stdout=f"{pgid}\nstarted\n", stderr="") == result
    assert_group_gone(pgid)


@pytest.mark.slow
async def test_cancelled_while_stopping_leftovers_keeps_their_grace_period(
    tmp_path: Path,
) -> None:
    """The command exited; its leftover got SIGTERM and is cleaning up when the call is
    cancelled: the stop goes on the same way (SIGKILL only after the grace period), then
    ``Cancelled`` propagates."""
    ready, term, cleaned = tmp_path / "ready", tmp_path / "term", tmp_path / "cleaned"
    leftover = (
        f"trap 'echo > {term}; sleep 0.3; echo > {cleaned}; exit 0' TERM; "
        f"sleep 30 & echo > {ready}; wait"
    )
    # The command exits once its leftover has set its trap.
    script = f"bash -c {shlex.quote(leftover)} & while [ ! -e {ready} ]; do sleep 0.01; done"
    caught: list[BaseException] = []
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            scope = trio.CancelScope()

            async def cancel_once_terminated() -> None:
                await poll_until(term.exists)
                scope.cancel()

            nursery.start_soon(cancel_once_terminated)
            with scope:
                try:
                    await run_command(["bash", "-c", script], grace_period=5)
                except trio.Cancelled as exc:
                    caught.append(exc)
                    raise
    assert [trio.Cancelled] == [type(exc) for exc in caught]
    assert cleaned.exists()  # the leftover finished its cleanup: no SIGKILL cut it short
    assert [] == [proc for proc in processes() if proc.session == proc.pgrp and proc.ppid == ME]


@pytest.mark.slow
async def test_run_command_checkpoints() -> None:
    with trio.testing.assert_checkpoints():
        await run_command(["true"])


# -- cancellation stops the whole group -----------------------------------------------------


@pytest.mark.slow
async def test_three_level_tree_is_stopped_whole(nursery: trio.Nursery) -> None:
    """bash -> sh -> sleep: every level is gone when the ABORTED result arrives."""
    argv = ["bash", "-c", "echo started; sh -c 'sleep 30; true'; true"]
    call = start_call(nursery, registry_with(checked(argv)))
    members = await wait_for_group("sleep")
    leader = next(proc for proc in members if proc.ppid == ME)
    middle = next(proc for proc in members if proc.ppid == leader.pid)
    leaf = next(proc for proc in members if proc.ppid == middle.pid)
    assert ("bash", "sh", "sleep") == (leader.comm, middle.comm, leaf.comm)
    # Its own session: a terminal's Ctrl-C (sent to our foreground group) cannot reach it.
    assert (leader.pid, leader.pid) == (leader.session, leader.pgrp)
    assert os.getsid(0) != leader.session

    started = time.monotonic()
    call.source.cancel("the user pressed stop")
    result = await finished(call)

    assert_group_gone(leader.pid)
    assert time.monotonic() - started < 5  # SIGTERM sufficed: no grace period waited out
    context = stopped(
        "bash -c 'echo started; sh -c '\"'\"'sleep 30; true'\"'\"'; true'",
        "the user pressed stop",
        "killed by SIGTERM",
        "[stdout]\nstarted",
    )
    assert aborted(contexts=[context]) == result


@pytest.mark.slow
async def test_child_ignoring_sigterm_is_killed_after_the_grace_period(
    nursery: trio.Nursery,
) -> None:
    # An ignored signal stays ignored across fork and exec: sh and sleep ignore it too.
    argv = ["bash", "-c", "trap '' TERM; sh -c 'sleep 30; true'; true"]
    call = start_call(nursery, registry_with(checked(argv, grace_period=0.3)))
    members = await wait_for_group("sleep")

    started = time.monotonic()
    call.source.cancel("stop")
    result = await finished(call)

    assert 0.3 <= time.monotonic() - started < 5
    assert_group_gone(members[0].pgrp)
    assert result.error is not None
    assert "ABORTED" == result.error.code
    assert ["run_command"] == [context.source for context in result.additional_contexts]
    assert "[stopped before it finished: stop; killed by SIGKILL]" in (
        result.additional_contexts[0].text
    )


@pytest.mark.slow
async def test_endless_flood_is_cancelled_with_bounded_output(nursery: trio.Nursery) -> None:
    async def body(ctx: ToolRunContext) -> object:
        return await run_command(["yes", "flood"], ctx=ctx, max_output=100)

    call = start_call(nursery, registry_with(body))
    members = await wait_for_group("yes")
    call.source.cancel("enough")
    result = await finished(call)

    assert_group_gone(members[0].pgrp)
    (context,) = result.additional_contexts
    assert context.text.startswith("$ yes flood\n[stopped before it finished: enough; killed by")
    assert "[stdout, truncated]\nflood\nflood\n" in context.text
    assert len(context.text) < 400


@pytest.mark.slow
async def test_tool_timeout_keeps_the_partial_output(nursery: trio.Nursery) -> None:
    argv = ["bash", "-c", "echo partial; echo oops >&2; sleep 30; true"]
    call = start_call(nursery, registry_with(checked(argv), timeout=1.0))
    members = await wait_for_group("sleep")  # both lines were written before sleep started
    result = await finished(call)

    assert_group_gone(members[0].pgrp)
    context = stopped(
        "bash -c 'echo partial; echo oops >&2; sleep 30; true'",
        "deadline exceeded after 1s",
        "killed by SIGTERM",
        "[stdout]\npartial",
        "[stderr]\noops",
    )
    expected = error(
        "ToolTimeoutError", "TOOL_TIMEOUT", "tool call timed out after 1s", contexts=[context]
    )
    assert expected == result


@pytest.mark.slow
async def test_already_cancelled_call_starts_nothing() -> None:
    children_before = [proc for proc in processes() if proc.ppid == ME]
    with trio.CancelScope() as scope:
        scope.cancel()
        await run_command(["sleep", "30"])
    assert scope.cancelled_caught
    assert children_before == [proc for proc in processes() if proc.ppid == ME]


@pytest.mark.slow
async def test_plain_cancel_scope_also_stops_the_group(nursery: trio.Nursery) -> None:
    """Without a registry: any enclosing scope's cancellation, re-raised unwrapped."""
    caught: list[BaseException] = []
    done = trio.Event()

    async def run(scope: trio.CancelScope) -> None:
        with scope:
            try:
                await run_command(["bash", "-c", "sleep 30; true"])
            except trio.Cancelled as exc:
                caught.append(exc)
                raise
            finally:
                done.set()

    scope = trio.CancelScope()
    nursery.start_soon(run, scope)
    members = await wait_for_group("sleep")
    scope.cancel()
    with trio.fail_after(10):
        await done.wait()
    assert [trio.Cancelled] == [type(exc) for exc in caught]
    assert_group_gone(members[0].pgrp)


# -- a SIGINT to the group (a terminal's Ctrl-C) never beats the stop ----------------------


@pytest.mark.slow
async def test_sigint_to_the_group_while_it_is_being_stopped_is_still_aborted(
    nursery: trio.Nursery,
) -> None:
    """The child dies by SIGINT during the grace period: the stop wins, not TOOL_FAILED."""
    argv = ["bash", "-c", "trap '' TERM; sleep 30; true"]
    call = start_call(nursery, registry_with(checked(argv, grace_period=30)))
    members = await wait_for_group("sleep")
    started = time.monotonic()
    call.source.cancel("stop")
    await trio.testing.wait_all_tasks_blocked()  # run_command sent SIGTERM, now it waits
    os.killpg(members[0].pgrp, signal.SIGINT)
    result = await finished(call)

    assert time.monotonic() - started < 10  # the SIGINT ended it, not the 30 s of grace
    assert_group_gone(members[0].pgrp)
    context = stopped(
        "bash -c 'trap '\"'\"''\"'\"' TERM; sleep 30; true'", "stop", "killed by SIGINT"
    )
    assert aborted(contexts=[context]) == result


@pytest.mark.slow
async def test_sigint_and_stop_at_the_same_moment_is_aborted(nursery: trio.Nursery) -> None:
    """The race of a terminal Ctrl-C hitting the child as the stop arrives, 10 times."""
    registry = registry_with(checked(["bash", "-c", "sleep 30; true"]))
    for _ in range(10):
        call = start_call(nursery, registry)
        members = await wait_for_group("sleep")
        os.killpg(members[0].pgrp, signal.SIGINT)
        call.source.cancel("stop")
        result = await finished(call)
        assert_group_gone(members[0].pgrp)
        assert "ABORTED" == (result.error.code if result.error else None)


@pytest.mark.slow
async def test_sigint_without_a_stop_is_the_commands_own_exit(nursery: trio.Nursery) -> None:
    """Nobody cancelled: a command killed by SIGINT simply returns -2."""

    async def body(ctx: ToolRunContext) -> str:
        result = await run_command(["bash", "-c", "sleep 30; true"], ctx=ctx)
        return f"returncode {result.returncode}"

    call = start_call(nursery, registry_with(body))
    members = await wait_for_group("sleep")
    os.killpg(members[0].pgrp, signal.SIGINT)
    assert ok("returncode -2") == await finished(call)
    assert_group_gone(members[0].pgrp)


# -- what a group kill cannot reach ---------------------------------------------------------


@pytest.mark.slow
async def test_own_session_escapes_the_stop_but_does_not_hang_the_call(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """A grandchild that calls setsid() survives; its open stdout does not hold the call."""
    pidfile = tmp_path / "escaped.pid"
    script = f"setsid sh -c 'echo $$ > {pidfile}; exec sleep 30' & echo started; sleep 30; true"
    call = start_call(nursery, registry_with(checked(["bash", "-c", script])))
    members = await wait_for_group("sleep")
    await poll_until(lambda: pidfile.exists() and pidfile.read_text().endswith("\n"))
    escaped = int(pidfile.read_text())
    try:
        call.source.cancel("stop")
        result = await finished(call)
        assert_group_gone(members[0].pgrp)
        assert "ABORTED" == (result.error.code if result.error else None)
        assert "[stdout]\nstarted" in result.additional_contexts[0].text
        (survivor,) = [proc for proc in processes() if proc.pid == escaped]
        assert ("sleep", True) == (survivor.comm, survivor.running)
    finally:
        os.kill(escaped, signal.SIGKILL)


@pytest.mark.slow
async def test_without_proc_only_the_commands_own_process_is_awaited(
    nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Other POSIX systems: the whole group is signalled, the command's process reaped."""
    monkeypatch.setattr(command_module, "_PROC", False)
    call = start_call(nursery, registry_with(checked(["bash", "-c", "sh -c 'sleep 30; true'"])))
    members = await wait_for_group("sleep")
    call.source.cancel("stop")
    result = await finished(call)
    assert "ABORTED" == (result.error.code if result.error else None)
    # The rest of the group got SIGTERM too, and dies soon after.
    await poll_until(lambda: not any(proc.running for proc in group(members[0].pgrp)))
    assert_group_gone(members[0].pgrp)


# -- bad input is a clear exception, never a hang --------------------------------------------


@pytest.mark.parametrize(
    ("command", "shell", "exception", "message"),
    [
        ([], False, ValueError, "command must name a program"),
        ([""], False, ValueError, "command must name a program"),
        ("", True, ValueError, "command must not be empty"),
        ("   ", True, ValueError, "command must not be empty"),
        ("ls -l", False, TypeError, "pass shell=True"),
        (["ls"], True, TypeError, "with shell=True, command must be a string"),
        (["ls", 3], False, TypeError, r"command\[1\] must be a str"),
        (b"ls", False, TypeError, "command must be a sequence of strings"),
    ],
)
async def test_bad_command_raises(
    command: Any, shell: bool, exception: type[Exception], message: str
) -> None:
    with trio.fail_after(5), pytest.raises(exception, match=message):
        await run_command(command, shell=shell)


@pytest.mark.parametrize(
    ("options", "exception", "message"),
    [
        ({"max_output": 0}, ValueError, "max_output must be a positive int"),
        ({"max_output": True}, ValueError, "max_output must be a positive int"),
        ({"grace_period": -1}, ValueError, "grace_period must be finite"),
        ({"grace_period": float("inf")}, ValueError, "grace_period must be finite"),
        ({"grace_period": float("nan")}, ValueError, "grace_period must be finite"),
        ({"env": {"A": 1}}, TypeError, "env must be a mapping of str to str"),
        ({"input": 3}, TypeError, "input must be bytes, str or None"),
        ({"shell": 1}, TypeError, "shell must be a bool"),
        ({"ctx": object()}, TypeError, "ctx must be the tool body's ToolRunContext"),
    ],
)
async def test_bad_option_raises(
    options: dict[str, Any], exception: type[Exception], message: str
) -> None:
    with trio.fail_after(5), pytest.raises(exception, match=message):
        await run_command(["true"], **options)


async def test_missing_executable_raises_file_not_found() -> None:
    with trio.fail_after(5), pytest.raises(FileNotFoundError, match="no-such-program"):
        await run_command(["no-such-program-xyz"])


async def test_missing_cwd_raises(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    with trio.fail_after(5), pytest.raises(FileNotFoundError, match="cwd does not exist"):
        await run_command(["true"], cwd=missing)


async def test_cwd_that_is_a_file_raises(tmp_path: Path) -> None:
    file = tmp_path / "file"
    file.write_text("")
    with trio.fail_after(5), pytest.raises(NotADirectoryError, match="cwd is not a directory"):
        await run_command(["true"], cwd=file)


@pytest.mark.slow
async def test_missing_program_under_the_shell_is_exit_status_127() -> None:
    result = await run_command("no-such-program-xyz", shell=True)
    assert (127, "") == (result.returncode, result.stdout)
    assert "no-such-program-xyz" in result.stderr


@pytest.mark.slow
async def test_without_pidfds_the_group_is_polled(
    nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Linux before 5.3: no pidfd_open, so run_command polls /proc; the tree still goes."""

    def no_pidfds(pid: int, flags: int = 0) -> int:
        raise OSError(errno.ENOSYS, "pidfd_open is not implemented")

    monkeypatch.setattr(os, "pidfd_open", no_pidfds)
    argv = ["bash", "-c", "sh -c 'sleep 30; true'; true"]
    call = start_call(nursery, registry_with(checked(argv)))
    members = await wait_for_group("sleep")
    call.source.cancel("stop")
    result = await finished(call)
    assert_group_gone(members[0].pgrp)
    assert "ABORTED" == (result.error.code if result.error else None)
