"""Code Mode: ``run_code`` runs a program in a real child Python whose tool calls are nested
dispatches of the registry, and reaches quiescence before it returns.

Every test runs real child processes on the real clock (virtual time would jump while Trio
waits for the child), with short limits; an autouse fixture checks that no child process of
the test is left, and the cancellation tests check that the program's own process is gone
(reaped, not a zombie) right when ``run_code`` returns.
"""

from __future__ import annotations

import ast
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
from helpers_registry import PreNext

from trio_tools import (
    AdditionalContext,
    CancelReason,
    CancelSource,
    Deny,
    ErrorInfo,
    ExecutionToken,
    Halt,
    TextBlock,
    ToolDefinition,
    ToolExecution,
    ToolExecutionInput,
    ToolRegistry,
    ToolResult,
    ToolRunContext,
    define_tool,
    timeout_policy,
)
from trio_tools.code_mode import (
    CODE_RUN_FAILED,
    CodeRunFailedError,
    CodeRuntime,
    SubprocessRuntime,
    run_code_tool,
    sdk_stub,
)

OUTER = "outer"


# -- processes ---------------------------------------------------------------------------


def child_pids() -> set[int]:
    """Every process whose parent is this one (zombies included: they are not reaped)."""
    me = os.getpid()
    found: set[int] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == me:
            found.add(int(entry))
    return found


def gone(pid: int) -> bool:
    """The process is dead and reaped (a zombie still answers signal 0)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.fixture(autouse=True)
def no_child_left() -> Any:
    before = child_pids()
    yield
    assert set() == child_pids() - before


# -- the lab: a registry with tools that record what happens ---------------------------


@attrs.frozen
class KeyArgs:
    key: str = ""


@attrs.frozen
class NoteArgs:
    text: str


@attrs.frozen
class ParArgs:
    i: int
    wait_for: int = 0


@attrs.define
class Lab:
    registry: ToolRegistry
    results: list[tuple[str, ToolResult]] = attrs.Factory(list)
    executions: dict[str, ToolExecution] = attrs.Factory(dict)
    notes: list[str] = attrs.Factory(list)
    held: dict[str, trio.Event] = attrs.Factory(dict)
    reasons: dict[str, CancelReason | None] = attrs.Factory(dict)
    log: list[str] = attrs.Factory(list)
    active: int = 0
    max_active: int = 0
    full: trio.Event = attrs.Factory(trio.Event)
    noted: trio.Event = attrs.Factory(trio.Event)

    def results_of(self, prefix: str) -> dict[str, ToolResult]:
        return {call_id: r for call_id, r in self.results if call_id.startswith(prefix)}

    async def run(
        self, code: str, *, signal: Any = None, agent: object = None, call_id: str = OUTER
    ) -> ToolResult:
        source = CancelSource()
        with trio.fail_after(20):  # a hang fails the test, with a traceback
            return await self.registry.execute(
                ToolExecutionInput(
                    call_id=call_id,
                    name="run_code",
                    arguments={"code": code},
                    signal=source.signal if signal is None else signal,
                    agent=agent,
                )
            )

    async def run_and_cancel(
        self, code: str, ready: Callable[[], Awaitable[object]], reason: str | None = None
    ) -> tuple[ToolResult, float]:
        """Run ``code``; once ``ready()`` returns, cancel the outer call.  The result, and
        the seconds from the cancellation to the result."""
        source = CancelSource()
        outcome: list[tuple[ToolResult, float]] = []

        async def run() -> None:
            result = await self.run(code, signal=source.signal)
            outcome.append((result, time.monotonic() - cancelled_at[0]))

        cancelled_at = [0.0]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run)
            with trio.fail_after(10):
                await ready()
            cancelled_at[0] = time.monotonic()
            source.cancel(reason)
        return outcome[0]


def make_lab(
    runtime: CodeRuntime | None = None, *, max_parallel_sub_calls: int = 10, **tool: Any
) -> Lab:
    registry = ToolRegistry()
    lab = Lab(registry)

    def observe(execution: ToolExecution, result: ToolResult) -> None:
        lab.results.append((execution.call_id, result))
        lab.executions[execution.call_id] = execution

    registry.add_observer(observe)

    async def note(args: NoteArgs, ctx: ToolRunContext) -> str:
        lab.notes.append(args.text)
        lab.noted.set()
        return "noted"

    async def hold(args: KeyArgs, ctx: ToolRunContext) -> str:
        """Wait until cancelled."""
        lab.held.setdefault(args.key, trio.Event()).set()
        try:
            await trio.sleep_forever()
        finally:
            lab.reasons[args.key] = ctx.signal.reason
        raise AssertionError("unreachable")

    async def wait_held(args: KeyArgs, ctx: ToolRunContext) -> str:
        await lab.held.setdefault(args.key, trio.Event()).wait()
        return "held"

    async def echo(args: object, ctx: ToolRunContext) -> object:
        return args

    async def par(args: ParArgs, ctx: ToolRunContext) -> str:
        lab.active += 1
        lab.max_active = max(lab.max_active, lab.active)
        lab.log.append(f"start par{args.i}")
        if lab.active >= args.wait_for > 0:
            lab.full.set()
        try:
            if args.wait_for:
                with trio.move_on_after(5):
                    await lab.full.wait()
            await trio.sleep(0.01)
        finally:
            lab.active -= 1
            lab.log.append(f"end par{args.i}")
        return "par"

    async def excl(args: object, ctx: ToolRunContext) -> str:
        lab.log.append(f"start excl (active: {lab.active})")
        await trio.sleep(0.05)
        lab.log.append("end excl")
        return "excl"

    for definition in (
        define_tool(note, concurrency_safe=True),
        define_tool(hold, concurrency_safe=True),
        define_tool(hold, name="hold_alone"),
        define_tool(wait_held, concurrency_safe=True),
        define_tool(echo, concurrency_safe=True),
        define_tool(par, concurrency_safe=True),
        define_tool(excl),
    ):
        registry.register(definition)
    registry.register(
        run_code_tool(
            registry,
            runtime=SubprocessRuntime(grace_period=0.5) if runtime is None else runtime,
            max_parallel_sub_calls=max_parallel_sub_calls,
            **tool,
        )
    )
    return lab


def failed(kind: str, message: str, output: str = "", **fields: Any) -> ToolResult:
    text = f"code run failed ({kind}): {message}"
    if output:
        text += f"\nCaptured output:\n{output}"
    return ToolResult(
        content=(TextBlock(f"Error: {text}"),),
        is_error=True,
        error=ErrorInfo("CodeRunFailedError", CODE_RUN_FAILED, text),
        **fields,
    )


def aborted(*, before_dispatch: bool = False, **fields: Any) -> ToolResult:
    code, text = (
        ("ABORTED_BEFORE_DISPATCH", "tool call aborted before dispatch")
        if before_dispatch
        else ("ABORTED", "tool call aborted")
    )
    return ToolResult(
        content=(TextBlock(f"Error: {text}"),),
        is_error=True,
        error=ErrorInfo("AbortError", code, text),
        **fields,
    )


def ok(text: str, **fields: Any) -> ToolResult:
    return ToolResult(content=(TextBlock(text),), **fields)


@attrs.define
class CountingRuntime:
    """A CodeRuntime around another: counts runs, and keeps every call's request and reply."""

    inner: CodeRuntime
    runs: int = 0
    requests: list[tuple[str, object]] = attrs.Factory(list)
    replies: list[Mapping[str, object]] = attrs.Factory(list)
    waiting: list[tuple[int, trio.Event]] = attrs.Factory(list)

    async def wait_for_requests(self, count: int) -> None:
        if len(self.requests) < count:
            arrived = trio.Event()
            self.waiting.append((count, arrived))
            await arrived.wait()

    async def run(self, code: str, call_tool: Any) -> str:
        self.runs += 1

        def counted(name: str, arguments: object) -> Awaitable[Mapping[str, object]]:
            # Called synchronously, as the contract says: the call takes its place now.
            self.requests.append((name, arguments))
            for count, arrived in self.waiting:
                if len(self.requests) >= count:
                    arrived.set()
            reply = call_tool(name, arguments)

            async def recorded() -> Mapping[str, object]:
                self.replies.append(await reply)
                return self.replies[-1]

            return recorded()

        return await self.inner.run(code, counted)


REJECTED = {
    "error": {
        "code": "ABORTED_BEFORE_DISPATCH",
        "message": "tool call aborted before dispatch: the code run has settled",
    }
}


# -- cancellation and settlement ---------------------------------------------------------


async def test_outer_cancellation_aborts_in_flight_rejects_queued_and_reaps_the_child() -> None:
    """Cancelled mid-run: the running sub-call sees the outer reason and is ABORTED, the
    queued (exclusive) one never reaches the registry, the child is dead and reaped, and
    the outer result is ABORTED."""
    runtime = CountingRuntime(SubprocessRuntime(grace_period=0.5))
    lab = make_lab(runtime)
    code = (
        "import os\n"
        "await tools.note(text=str(os.getpid()))\n"
        "first = asyncio.create_task(tools.hold_alone(key='a'))\n"
        "second = asyncio.create_task(tools.hold_alone(key='b'))\n"
        "await asyncio.gather(first, second)\n"
    )

    async def ready() -> None:
        await lab.held.setdefault("a", trio.Event()).wait()
        await runtime.wait_for_requests(3)  # note, the first hold, the second

    result, _ = await lab.run_and_cancel(code, ready, "user pressed stop")

    assert aborted() == result
    assert CancelReason("CANCELLED", "user pressed stop") == lab.reasons["a"]
    assert {
        f"{OUTER}:code:1": ok("noted"),
        f"{OUTER}:code:2": aborted(),
    } == lab.results_of(f"{OUTER}:")
    assert "b" not in lab.held
    assert ("hold_alone", {"key": "b"}) == runtime.requests[2]
    assert gone(int(lab.notes[0]))


async def test_ambient_cancellation_settles_the_run_and_propagates() -> None:
    """A Trio scope around the caller (not the signal): the nested call is still cancelled
    through the run's signal and publishes its result, the child is reaped, and
    ``trio.Cancelled`` reaches the scope."""
    lab = make_lab()
    code = "import os\nawait tools.note(text=str(os.getpid()))\nawait tools.hold(key='a')\n"

    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:

            async def cancel_when_held() -> None:
                await lab.held.setdefault("a", trio.Event()).wait()
                scope.cancel()

            nursery.start_soon(cancel_when_held)
            await lab.run(code)

    assert scope.cancelled_caught
    assert CancelReason("CANCELLED", "run_code settled") == lab.reasons["a"]
    assert [("note", ok("noted")), ("hold", aborted()), ("run_code", aborted())] == [
        (lab.executions[call_id].name, r) for call_id, r in lab.results
    ]
    assert gone(int(lab.notes[0]))


async def test_pre_aborted_outer_call_starts_no_child() -> None:
    runtime = CountingRuntime(SubprocessRuntime())
    lab = make_lab(runtime)
    source = CancelSource()
    source.cancel("too late")

    result = await lab.run("print('never')", signal=source.signal)

    assert aborted(before_dispatch=True) == result
    assert 0 == runtime.runs
    assert [OUTER] == [call_id for call_id, _ in lab.results]


async def test_program_raising_after_starting_a_sub_call_settles_it_first() -> None:
    """The sub-call is cancelled (reason "run_code settled") and its result published
    before the outer one; a queued call is rejected without dispatch; the failure carries
    the captured output."""
    runtime = CountingRuntime(SubprocessRuntime())
    lab = make_lab(runtime)
    code = (
        "running = asyncio.create_task(tools.hold(key='a'))\n"
        "await tools.wait_held(key='a')\n"
        "queued = asyncio.create_task(tools.hold_alone(key='b'))\n"
        "await asyncio.sleep(0.05)\n"
        "print('about to raise')\n"
        "raise RuntimeError('boom')\n"
    )

    result = await lab.run(code)

    output = (
        "about to raise\n"
        "Traceback (most recent call last):\n"
        '  File "<run_code>", line 6, in <module>\n'
        "    raise RuntimeError('boom')\n"
        "RuntimeError: boom\n"
    )
    assert failed("exception", "RuntimeError: boom", output) == result
    assert CancelReason("CANCELLED", "run_code settled") == lab.reasons["a"]
    # The program's tasks decide the numbering; the publication order is what counts.
    assert [("wait_held", ok("held")), ("hold", aborted()), ("run_code", result)] == [
        (lab.executions[call_id].name, r) for call_id, r in lab.results
    ]
    assert "b" not in lab.held
    assert ("hold_alone", {"key": "b"}) in runtime.requests


@attrs.define
class KeepingRuntime:
    """A CodeRuntime that runs no program: it keeps ``call_tool`` for later."""

    kept: list[Any] = attrs.Factory(list)

    async def run(self, code: str, call_tool: Any) -> str:
        self.kept.append(call_tool)
        await trio.lowlevel.checkpoint()
        if code == "fail":
            raise CodeRunFailedError("exception", "ValueError: late")
        return "finished\n"


@pytest.mark.parametrize("code", ["ok", "fail"])
async def test_a_binding_called_after_the_run_is_rejected_without_dispatch(code: str) -> None:
    runtime = KeepingRuntime()
    lab = make_lab(runtime)

    result = await lab.run(code)
    reply = await runtime.kept[0]("echo", {"late": True})

    assert (ok("finished\n") if code == "ok" else failed("exception", "ValueError: late")) == (
        result
    )
    assert REJECTED == reply
    assert [OUTER] == [call_id for call_id, _ in lab.results]


# -- scheduling --------------------------------------------------------------------------


async def test_parallel_sub_calls_overlap_up_to_the_limit() -> None:
    lab = make_lab(max_parallel_sub_calls=3)
    code = "await asyncio.gather(*(tools.par(i=i, wait_for=3) for i in range(6)))\nprint('ok')"

    result = await lab.run(code)

    assert ok("ok\n") == result
    assert 3 == lab.max_active


async def test_overlapping_sub_calls_start_in_the_programs_order() -> None:
    """Calls dispatched together enter the registry (its pre-execute hooks first) in the
    order the program made them, whatever order Trio runs their tasks in."""
    lab = make_lab()
    entered: list[str] = []

    async def hook(execution: ToolExecution, call_next: PreNext) -> Any:
        entered.append(execution.call_id)
        return await call_next()

    lab.registry.add_pre_execute(hook)
    # Trio runs a batch of new tasks forwards or backwards at random: 12 rounds of 5.
    code = "for _ in range(12):\n    await asyncio.gather(*(tools.par(i=i) for i in range(5)))"

    result = await lab.run(code)

    assert ok("") == result
    assert [f"{OUTER}:code:{n}" for n in range(1, 61)] == entered[1:]


async def test_an_exclusive_sub_call_runs_alone() -> None:
    """Calls start in program order; the exclusive one waits for the running call and holds
    back the one after it."""
    lab = make_lab()
    code = "await asyncio.gather(tools.par(i=1), tools.excl(), tools.par(i=2))"

    result = await lab.run(code)

    assert ok("") == result
    assert [
        "start par1",
        "end par1",
        "start excl (active: 0)",
        "end excl",
        "start par2",
        "end par2",
    ] == lab.log


# -- what nested results bring to the outer call -----------------------------------------


def add_context_tool(lab: Lab) -> None:
    async def remind(args: KeyArgs, ctx: ToolRunContext) -> str:
        ctx.defer_context(AdditionalContext(f"reminder {args.key}", source="remind"))
        if args.key == "halt":
            ctx.halt_turn("enough")
        ctx.conclude_turn()
        return "reminded"

    lab.registry.register(define_tool(remind, concurrency_safe=True))


async def test_sub_call_contexts_halts_and_conclusions_reach_the_outer_result() -> None:
    lab = make_lab()
    add_context_tool(lab)
    code = "print(await tools.remind(key='one'))\nprint(await tools.remind(key='halt'))"

    result = await lab.run(code)

    assert (
        ok(
            "reminded\nreminded\n",
            additional_contexts=(
                AdditionalContext("reminder one", source="remind"),
                AdditionalContext("reminder halt", source="remind"),
            ),
            halt=Halt("enough"),
            concludes_turn=True,
        )
        == result
    )


async def test_sub_call_contexts_stay_when_the_run_later_fails() -> None:
    lab = make_lab()
    add_context_tool(lab)

    result = await lab.run("await tools.remind(key='halt')\n1 / 0")

    output = (
        "Traceback (most recent call last):\n"
        '  File "<run_code>", line 2, in <module>\n'
        "    1 / 0\n"
        "     ~~^~~\n"
        "ZeroDivisionError: division by zero\n"
    )
    assert (
        failed(
            "exception",
            "ZeroDivisionError: division by zero",
            output,
            additional_contexts=(AdditionalContext("reminder halt", source="remind"),),
            halt=Halt("enough"),
        )
        == result
    )


# -- errors inside the program -------------------------------------------------------------


async def test_tool_errors_and_denials_raise_a_catchable_tool_error() -> None:
    lab = make_lab()

    async def deny_par(execution: ToolExecution, call_next: PreNext) -> Any:
        if execution.name == "par":
            return Deny("no par today")
        return await call_next()

    lab.registry.add_pre_execute(deny_par)

    async def broken(args: object, ctx: ToolRunContext) -> str:
        raise ValueError("it broke")

    lab.registry.register(define_tool(broken))
    code = (
        "for call in (lambda: tools.par(i=1), lambda: tools.broken(), lambda: tools.nope()):\n"
        "    try:\n"
        "        await call()\n"
        "    except ToolError as error:\n"
        "        print(type(error).__name__, error.code, '|', error.message)\n"
    )

    result = await lab.run(code)

    assert (
        ok(
            "ToolError DENIED | no par today\n"
            "ToolError TOOL_FAILED | it broke\n"
            'ToolError UNKNOWN_TOOL | unknown tool "nope"\n'
        )
        == result
    )


async def test_non_json_binding_arguments_are_rejected_before_any_dispatch() -> None:
    runtime = CountingRuntime(SubprocessRuntime())
    lab = make_lab(runtime)
    code = (
        "class Thing: pass\n"
        "loop = []\n"
        "loop.append(loop)\n"
        "for bad in ({1, 2}, float('nan'), {1: 'a'}, Thing(), b'x', loop):\n"
        "    try:\n"
        "        await tools.echo(value=bad)\n"
        "    except ToolError as error:\n"
        "        print(error.code, error.message)\n"
    )

    result = await lab.run(code)

    prefix = "NOT_JSON tool execution arguments must be losslessly JSON-serializable"
    assert (
        ok(
            f"{prefix} ($.value: set is not JSON)\n"
            f"{prefix} ($.value: nan is not a finite number)\n"
            f"{prefix} ($.value: key 1 is not a str)\n"
            f"{prefix} ($.value: Thing is not JSON)\n"
            f"{prefix} ($.value: bytes is not JSON)\n"
            f"{prefix} ($.value[0]: a cycle)\n"
        )
        == result
    )
    assert [] == runtime.requests
    assert [OUTER] == [call_id for call_id, _ in lab.results]


async def test_syntax_error() -> None:
    lab = make_lab()

    result = await lab.run("print('a'\n")

    output = (
        '  File "<run_code>", line 1\n'
        "    print('a'\n"
        "         ^\n"
        "SyntaxError: '(' was never closed\n"
    )
    assert failed("syntax", "'(' was never closed (line 1)", output) == result


@pytest.mark.slow
async def test_output_flood_is_killed_at_the_output_limit() -> None:
    lab = make_lab(SubprocessRuntime(max_output=1000))

    result = await lab.run("while True:\n    print('x' * 99)\n")

    assert (
        failed(
            "output_limit",
            "the program wrote more than 1000 bytes of output",
            ("x" * 99 + "\n") * 10,
        )
        == result
    )


@pytest.mark.slow
async def test_memory_limit_kills_the_run() -> None:
    limit = 256 * 1024 * 1024
    lab = make_lab(SubprocessRuntime(memory_limit=limit))

    result = await lab.run("print('allocating')\nblob = bytearray(2 * 1024 ** 3)\n")

    assert (
        failed(
            "killed",
            f"the program ran out of memory (memory limit: {limit} bytes)",
            "allocating\n",
        )
        == result
    )


async def test_a_signal_kills_the_run() -> None:
    lab = make_lab()

    result = await lab.run("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")

    assert failed("killed", "the program was killed by SIGKILL") == result


@pytest.mark.slow
@pytest.mark.parametrize(
    "code",
    [
        "import os, time\nawait tools.note(text=str(os.getpid()))\ntime.sleep(30)\n",
        "import os\nawait tools.note(text=str(os.getpid()))\nawait tools.hold(key='a')\n",
    ],
    ids=["busy-child", "waiting-on-a-sub-call"],
)
async def test_the_tools_timeout_is_tool_timeout_and_the_child_is_reaped(code: str) -> None:
    """Under the registry's own timeout enforcement, and under an explicit policy."""
    lab = make_lab(timeout=0.5)
    if "time.sleep" in code:
        lab.registry.add_around_execute(timeout_policy())
    started = time.monotonic()

    result = await lab.run(code)

    assert time.monotonic() - started < 5
    assert (
        ToolResult(
            content=(TextBlock("Error: tool call timed out after 0.5s"),),
            is_error=True,
            error=ErrorInfo("ToolTimeoutError", "TOOL_TIMEOUT", "tool call timed out after 0.5s"),
        )
        == result
    )
    assert gone(int(lab.notes[0]))
    if "hold" in code:
        reason = lab.reasons["a"]
        assert reason is not None
        assert "TOOL_TIMEOUT" == reason.code


@pytest.mark.slow
async def test_a_child_ignoring_sigterm_is_killed_after_the_grace_period() -> None:
    lab = make_lab(SubprocessRuntime(grace_period=0.3))
    code = (
        "import os, signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "await tools.note(text=str(os.getpid()))\n"
        "time.sleep(30)\n"
    )

    result, elapsed = await lab.run_and_cancel(code, lab.noted.wait)

    assert 0.3 <= elapsed < 5
    assert aborted() == result
    assert gone(int(lab.notes[0]))


# -- identity ----------------------------------------------------------------------------


async def test_nested_calls_carry_the_outer_token_agent_and_numbered_ids() -> None:
    lab = make_lab()
    agent = object()

    result = await lab.run(
        "await tools.echo(n=1)\nprint(await tools.echo(n=2))", agent=agent, call_id="step-7"
    )

    assert ok('{"n":2}\n') == result
    outer = lab.executions["step-7"]
    nested = [lab.executions[f"step-7:code:{n}"] for n in (1, 2)]
    assert [outer.token, outer.token] == [e.parent for e in nested]
    assert [agent, agent] == [e.agent for e in nested]
    assert all(isinstance(e.token, ExecutionToken) and e.token is not outer.token for e in nested)


async def test_run_code_cannot_call_itself() -> None:
    lab = make_lab()
    code = (
        "try:\n"
        "    await tools.run_code(code='print(1)')\n"
        "except ToolError as error:\n"
        "    print(error.code, error.message)\n"
    )

    result = await lab.run(code)

    assert ok('DENIED "run_code" cannot call itself\n') == result
    assert [OUTER] == [call_id for call_id, _ in lab.results]


# -- the stub ----------------------------------------------------------------------------


@attrs.frozen
class ReadArgs:
    path: str
    max_bytes: int = 65536
    mode: str | None = None


def test_sdk_stub_renders_every_tool_style_from_its_schema() -> None:
    registry = ToolRegistry()

    async def read_file(args: ReadArgs, ctx: ToolRunContext) -> str:
        """Read a UTF-8 text file."""
        return ""

    async def raw(args: object, ctx: ToolRunContext) -> str:
        return ""

    registry.register(define_tool(read_file))
    registry.register(define_tool(raw, description="Anything goes."))

    @registry.tool(timeout=30)
    async def grep(pattern: str, max_hits: int = 3, *, ctx: ToolRunContext) -> str:
        """Search the workspace.

        Args:
            pattern: A regular expression.
            max_hits: Stop after this many.
        """
        return ""

    # A hand-written schema, with what neither style above produces.
    registry.register(
        ToolDefinition(
            name="search",
            description="Search the web.",
            execute=raw,
            parameters={
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "What to look for."},
                    "limit": {"type": "integer", "default": 10},
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "kind": {"enum": ["news", "pages"]},
                },
                "required": ["query"],
            },
        )
    )
    registry.register(run_code_tool(registry))

    stub = sdk_stub(registry)

    assert stub.endswith(
        "    @staticmethod\n"
        "    async def read_file(*, path: str, max_bytes: int = 65536, mode: str | None = None)"
        " -> str:\n"
        '        """Read a UTF-8 text file."""\n'
        "\n"
        "    @staticmethod\n"
        "    async def raw(**arguments: object) -> str:\n"
        '        """Anything goes."""\n'
        "\n"
        "    @staticmethod\n"
        "    async def grep(*, pattern: str, max_hits: int = 3) -> str:\n"
        '        """Search the workspace.\n'
        "\n"
        "        Args:\n"
        "            pattern: A regular expression.\n"
        "            max_hits: Stop after this many.\n"
        '        """\n'
        "\n"
        "    @staticmethod\n"
        "    async def search(*, query: str, limit: int = 10, tags: list[str] = ...,"
        " kind: Literal['news', 'pages'] = ...) -> str:\n"
        '        """Search the web.\n'
        "\n"
        "        Args:\n"
        "            query: What to look for.\n"
        '        """\n'
    ), stub
    assert "run_code" not in stub
    ast.parse(stub)


def test_run_code_description_embeds_the_stub() -> None:
    lab = make_lab()
    definition = lab.registry.get("run_code")
    assert definition is not None
    assert sdk_stub(lab.registry) in definition.description
    assert {"code"} == set(definition.parameters["properties"])  # type: ignore[arg-type]


# -- arguments -----------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, -1, True, 1.5, "3"])
def test_max_parallel_sub_calls_must_be_a_positive_int(value: Any) -> None:
    with pytest.raises(ValueError, match="max_parallel_sub_calls must be an int >= 1"):
        run_code_tool(ToolRegistry(), max_parallel_sub_calls=value)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("memory_limit", 0),
        ("memory_limit", True),
        ("max_output", 0),
        ("grace_period", -1),
        ("grace_period", float("nan")),
        ("python", ()),
    ],
)
def test_subprocess_runtime_validates_its_options(field: str, value: Any) -> None:
    with pytest.raises(ValueError, match=field):
        SubprocessRuntime(**{field: value})


def test_code_run_failed_error_message_and_kind() -> None:
    error = CodeRunFailedError("killed", "gone", "partial\n")
    assert "code run failed (killed): gone\nCaptured output:\npartial\n" == str(error)
    assert ("killed", "gone", "partial\n", CODE_RUN_FAILED) == (
        error.kind,
        error.message,
        error.output,
        error.code,
    )
    with pytest.raises(ValueError, match="kind"):
        CodeRunFailedError("weird", "x")  # type: ignore[arg-type]


# -- the public surface ------------------------------------------------------------------


def test_every_code_mode_name_is_exported_and_documented_with_its_parameters() -> None:
    import inspect
    import re

    from trio_tools import code_mode

    api = (Path(__file__).parent.parent / "docs" / "api.md").read_text(encoding="utf-8")
    for name in code_mode.__all__:
        value = getattr(code_mode, name)
        assert "_" == name[0] or "trio_tools.code_mode" == getattr(
            value, "__module__", "trio_tools.code_mode"
        ), name
        match = re.search(rf"^### `code_mode\.{name}`\n(.*?)(?=^### |\Z)", api, re.M | re.S)
        assert match is not None, f"docs/api.md has no section for code_mode.{name}"
        if inspect.isfunction(value):
            parameters = list(inspect.signature(value).parameters)
        elif attrs.has(value):
            parameters = [field.name for field in attrs.fields(value)]
        else:
            parameters = []
        assert [] == [p for p in parameters if not re.search(rf"\b{p}\b", match.group(1))]


def test_import_trio_tools_does_not_import_code_mode() -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, trio_tools; print('trio_tools.code_mode' in sys.modules)",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "False\n" == done.stdout
