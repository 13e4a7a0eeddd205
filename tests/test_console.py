"""console_approver under a pseudo-terminal: y / n / a, end of input, and a stop.

The approver gets the pty's slave side as both stdin and stdout (one open file description,
as a real terminal's fds 0, 1 and 2 are); the test plays the user on the master side: it
reads the screen and types answers.  The terminal echoes what is typed and turns ``\\n`` into
``\\r\\n`` on the way out; the screen is compared with ``\\r\\n`` read as ``\\n``.
"""

from __future__ import annotations

import io
import os
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TextIO

import attrs
import pytest
import trio
import trio.testing
from helpers_registry import aborted_before_dispatch, denied, ok

from trio_tools import (
    ApprovalAnswer,
    ApprovalRequest,
    Ask,
    CancelSource,
    PreDecision,
    ToolExecution,
    ToolExecutionInput,
    ToolRegistry,
    ToolResult,
    ToolRunContext,
    console_approver,
    open_sigint_cancel,
)

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="pseudo-terminals are Unix")

PROMPT = "  allow? [y]es / [N]o / [a]lways for this tool > "


@attrs.define
class Terminal:
    """The user's side of a pseudo-terminal."""

    master: trio.lowlevel.FdStream
    slave: int
    out: TextIO
    screen: str = ""
    seen: int = 0  # how much of the screen the test has looked at

    async def read_until(self, text: str) -> str:
        """Everything new on the screen up to and including ``text``."""
        with trio.fail_after(5):
            while text not in self.screen[self.seen :]:
                chunk = await self.master.receive_some(4096)
                self.screen += chunk.decode().replace("\r\n", "\n")
        end = self.screen.index(text, self.seen) + len(text)
        shown, self.seen = self.screen[self.seen : end], end
        return shown

    async def type(self, keys: str) -> None:
        await self.master.send_all(keys.encode())


@pytest.fixture
async def terminal() -> AsyncIterator[Terminal]:
    master, slave = os.openpty()
    # The test's own FdStream makes the *master's* description non-blocking, not the slave's.
    stream = trio.lowlevel.FdStream(master)
    out = os.fdopen(slave, "w", encoding="utf-8", closefd=False)  # closed below
    try:
        yield Terminal(stream, slave, out)
    finally:
        out.close()
        os.close(slave)
        await stream.aclose()


def make_registry(approver: Callable[..., Awaitable[object]]) -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool
    async def delete_file(args: object, ctx: ToolRunContext) -> str:
        """Delete a file."""
        return "deleted"

    @registry.tool
    async def send_mail(args: object, ctx: ToolRunContext) -> str:
        """Send a mail."""
        return "sent"

    async def ask(exec: ToolExecution, call_next: Callable[[], Awaitable[PreDecision]]) -> Ask:
        return Ask("This cannot be undone.")

    registry.add_pre_execute(ask)
    registry.set_approver(approver)  # type: ignore[arg-type]  # any approver-shaped callable
    return registry


@attrs.define
class Calls:
    registry: ToolRegistry
    nursery: trio.Nursery
    results: dict[str, ToolResult] = attrs.Factory(dict)

    def start(
        self, call_id: str, name: str = "delete_file", source: CancelSource | None = None
    ) -> trio.Event:
        done = trio.Event()
        signal = (source or CancelSource()).signal

        async def run() -> None:
            call = ToolExecutionInput(
                call_id=call_id, name=name, arguments={"path": "notes.txt"}, signal=signal
            )
            self.results[call_id] = await self.registry.execute(call)
            done.set()

        self.nursery.start_soon(run)
        return done

    async def result(self, call_id: str, done: trio.Event) -> ToolResult:
        with trio.fail_after(5):
            await done.wait()
        return self.results[call_id]


@pytest.fixture
async def calls(terminal: Terminal) -> AsyncIterator[Calls]:
    registry = make_registry(console_approver(stdin=terminal.slave, stdout=terminal.out))
    async with trio.open_nursery() as nursery:
        yield Calls(registry, nursery)


REJECTED = denied('the user rejected tool "delete_file"')
CANCELLED = denied('approval for tool "delete_file" was cancelled')


async def test_prompt_shows_the_call_and_yes_grants_it(terminal: Terminal, calls: Calls) -> None:
    done = calls.start("c1")
    shown = await terminal.read_until(PROMPT)
    assert f'? This cannot be undone.\n  delete_file {{"path":"notes.txt"}}\n{PROMPT}' == shown
    await terminal.type("y\n")
    assert ok("deleted") == await calls.result("c1", done)


@pytest.mark.parametrize("answer", ["n", "no", "NO", ""])
async def test_no_or_enter_rejects(terminal: Terminal, calls: Calls, answer: str) -> None:
    done = calls.start("c1")
    await terminal.read_until(PROMPT)
    await terminal.type(f"{answer}\n")
    assert REJECTED == await calls.result("c1", done)


async def test_always_allows_the_tool_for_the_approvers_lifetime(
    terminal: Terminal, calls: Calls
) -> None:
    done = calls.start("c1")
    await terminal.read_until(PROMPT)
    await terminal.type("a\n")
    assert ok("deleted") == await calls.result("c1", done)

    done = calls.start("c2")  # no prompt this time
    assert ok("deleted") == await calls.result("c2", done)
    shown = await terminal.read_until("(always)\n")
    assert 'a\n  delete_file {"path":"notes.txt"}: allowed (always)\n' == shown

    done = calls.start("c3", name="send_mail")  # another tool still asks
    assert f'  send_mail {{"path":"notes.txt"}}\n{PROMPT}' in await terminal.read_until(PROMPT)
    await terminal.type("n\n")
    assert denied('the user rejected tool "send_mail"') == await calls.result("c3", done)


async def test_anything_else_asks_again(terminal: Terminal, calls: Calls) -> None:
    done = calls.start("c1")
    await terminal.read_until(PROMPT)
    await terminal.type("maybe\n")
    assert f"maybe\n  please answer y, n or a\n{PROMPT}" == await terminal.read_until(PROMPT)
    await terminal.type("yes\n")
    assert ok("deleted") == await calls.result("c1", done)


async def test_end_of_input_is_cancelled(terminal: Terminal, calls: Calls) -> None:
    done = calls.start("c1")
    await terminal.read_until(PROMPT)
    await terminal.type("\x04")  # Ctrl-D at the start of a line
    assert CANCELLED == await calls.result("c1", done)
    await terminal.read_until("(end of input)\n")


async def test_stop_interrupts_the_prompt_and_loses_no_input(
    terminal: Terminal, calls: Calls
) -> None:
    source = CancelSource()
    done = calls.start("c1", source=source)
    await terminal.read_until(PROMPT)
    await trio.testing.wait_all_tasks_blocked()
    # While the prompt waits, the terminal (stdin and stdout alike) stays blocking.
    assert os.get_blocking(terminal.slave)

    source.cancel("the user pressed stop")
    assert aborted_before_dispatch() == await calls.result("c1", done)
    assert "(interrupted: the user pressed stop)\n" == await terminal.read_until("\n")
    assert os.get_blocking(terminal.slave)

    # Nobody is still reading: the next line answers the next prompt.
    await terminal.type("y\n")
    done = calls.start("c2")
    await terminal.read_until(PROMPT)
    assert ok("deleted") == await calls.result("c2", done)


async def test_fdstream_would_make_the_terminal_non_blocking(terminal: Terminal) -> None:
    """Why the approver does not use FdStream: stdout shares stdin's non-blocking flag."""
    stream = trio.lowlevel.FdStream(os.dup(terminal.slave))
    try:
        assert not os.get_blocking(terminal.slave)
    finally:
        await stream.aclose()
    assert os.get_blocking(terminal.slave)


async def test_concurrent_calls_are_asked_one_at_a_time(terminal: Terminal, calls: Calls) -> None:
    first = calls.start("c1")
    await terminal.read_until(PROMPT)
    second = calls.start("c2", name="send_mail")
    await trio.testing.wait_all_tasks_blocked()
    assert "send_mail" not in terminal.screen  # not asked while the first prompt waits
    await terminal.type("y\n")
    assert ok("deleted") == await calls.result("c1", first)
    assert "send_mail" in await terminal.read_until(PROMPT)
    await terminal.type("n\n")
    assert denied('the user rejected tool "send_mail"') == await calls.result("c2", second)


async def test_piped_answers_are_echoed_and_buffered_across_prompts() -> None:
    read_end, write_end = os.pipe()
    out = io.StringIO()
    registry = make_registry(console_approver(stdin=read_end, stdout=out))
    try:
        os.write(write_end, b"y\nn\n")  # two answers in one read
        signal = CancelSource().signal
        results = [
            await registry.execute(
                ToolExecutionInput(call_id=f"c{i}", name="delete_file", arguments={}, signal=signal)
            )
            for i in (1, 2)
        ]
        os.close(write_end)
        write_end = -1
        third = await registry.execute(
            ToolExecutionInput(call_id="c3", name="delete_file", arguments={}, signal=signal)
        )
    finally:
        os.close(read_end)
        if write_end != -1:
            os.close(write_end)
    assert [ok("deleted"), REJECTED, CANCELLED] == [*results, third]
    assert [f"{PROMPT}y", f"{PROMPT}n", f"{PROMPT}(end of input)"] == [
        line for line in out.getvalue().splitlines() if line.startswith(PROMPT)
    ]


async def test_defaults_to_sys_stdin_and_sys_stdout(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Looked up at each prompt; a regular file as stdin is read directly."""
    answers = tmp_path / "answers.txt"
    answers.write_text("n\n")
    out = io.StringIO()
    with answers.open() as stdin:
        monkeypatch.setattr(sys, "stdin", stdin)
        monkeypatch.setattr(sys, "stdout", out)
        registry = make_registry(console_approver())
        result = await registry.execute(
            ToolExecutionInput(
                call_id="c1", name="delete_file", arguments=[1, 2.5], signal=CancelSource().signal
            )
        )
    assert REJECTED == result
    assert f"? This cannot be undone.\n  delete_file [1,2.5]\n{PROMPT}n\n" == out.getvalue()


async def test_the_calls_own_signal_interrupts_even_under_a_shield(terminal: Terminal) -> None:
    """Bound to the call's signal itself, not only through the registry's gate scope."""
    inner = console_approver(stdin=terminal.slave, stdout=terminal.out)
    answers: list[str] = []

    async def shielded(request: ApprovalRequest) -> ApprovalAnswer:
        with trio.CancelScope(shield=True):  # hides the registry's gate cancellation
            answer = await inner(request)
        answers.append(answer)
        return answer

    source = CancelSource()
    async with trio.open_nursery() as nursery:
        calls = Calls(make_registry(shielded), nursery)
        done = calls.start("c1", source=source)
        await terminal.read_until(PROMPT)
        source.cancel("stop")
        assert aborted_before_dispatch() == await calls.result("c1", done)
    assert ["cancelled"] == answers
    assert "(interrupted: stop)\n" == await terminal.read_until("\n")


async def test_dev_null_is_end_of_input() -> None:
    out = io.StringIO()
    with open(os.devnull, "rb") as stdin:  # noqa: ASYNC230 - /dev/null never blocks
        registry = make_registry(console_approver(stdin=stdin, stdout=out))
        result = await registry.execute(
            ToolExecutionInput(
                call_id="c1", name="delete_file", arguments={}, signal=CancelSource().signal
            )
        )
    assert CANCELLED == result
    assert out.getvalue().endswith(f"{PROMPT}(end of input)\n")


def test_ctrl_c_interrupts_the_prompt_and_stops_the_turn() -> None:
    """The terminal shared by a prompt and the stop key: Ctrl-C under open_sigint_cancel."""
    before = signal.getsignal(signal.SIGINT)
    master, slave = os.openpty()
    out = os.fdopen(slave, "w", encoding="utf-8", closefd=False)
    registry = make_registry(console_approver(stdin=slave, stdout=out))
    source = CancelSource()
    screen: list[str] = []

    async def main() -> ToolResult:
        async with trio.lowlevel.FdStream(master) as stream:
            terminal = Terminal(stream, slave, out)
            with open_sigint_cancel(source, reason="Ctrl-C"):
                async with trio.open_nursery() as nursery:
                    calls = Calls(registry, nursery)
                    done = calls.start("c1", source=source)
                    await terminal.read_until(PROMPT)
                    signal.raise_signal(signal.SIGINT)  # what the terminal does on Ctrl-C
                    result = await calls.result("c1", done)
                    screen.append(await terminal.read_until("\n"))
            return result

    try:
        result = trio.run(main)
    finally:
        out.close()
        os.close(slave)
    assert aborted_before_dispatch() == result
    assert ["(interrupted: Ctrl-C)\n"] == screen
    assert before is signal.getsignal(signal.SIGINT)
