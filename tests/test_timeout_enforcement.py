"""Timeouts that just work: the registry enforces ``timeout`` by itself (innermost), an
explicit ``timeout_policy()`` keeps its position and is applied once, ``enforce_timeouts=False``
makes ``timeout`` metadata only, and ``timeout`` may be a callable of the parsed arguments."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
import trio
import trio.testing
from helpers_registry import TOOL, AroundNext, Harness, error, ok
from trio.testing import MockClock

from trio_tools import (
    ToolDefinition,
    ToolDispatchExecution,
    ToolRegistry,
    ToolResult,
    ToolRunContext,
    define_tool,
    timeout_policy,
)


def timed_out(seconds: str) -> ToolResult:
    return error("ToolTimeoutError", "TOOL_TIMEOUT", f"tool call timed out after {seconds}s")


async def slow(seconds: float) -> str:
    """Sleeps ``seconds`` (virtual time)."""
    await trio.sleep(seconds)
    return "done"


def harness(**registry_options: Any) -> Harness:
    return Harness(ToolRegistry(**registry_options))


async def test_a_tool_timeout_is_enforced_without_installing_a_policy(
    autojump_clock: MockClock,
) -> None:
    h = harness()
    h.registry.tool(slow, name=TOOL, timeout=0.1)

    assert timed_out("0.1") == await h.execute(arguments={"seconds": 1})
    assert ok("done") == await h.execute(arguments={"seconds": 0.05})


async def test_with_enforce_timeouts_false_a_timeout_is_only_metadata(
    autojump_clock: MockClock,
) -> None:
    h = harness(enforce_timeouts=False)
    definition = h.registry.tool(slow, name=TOOL, timeout=0.1)

    assert ok("done") == await h.execute(arguments={"seconds": 1})
    assert 0.1 == definition.timeout


async def test_with_enforce_timeouts_false_an_explicit_policy_still_applies(
    autojump_clock: MockClock,
) -> None:
    h = harness(enforce_timeouts=False)
    h.registry.add_around_execute(timeout_policy())
    h.registry.tool(slow, name=TOOL, timeout=0.1)

    assert timed_out("0.1") == await h.execute(arguments={"seconds": 1})


def waiting_wrapper(seconds: float) -> Any:
    """An around-execute wrapper that waits ``seconds`` (under ``exec.signal``) before
    calling the next step: time spent there is timed only by a policy outside it."""

    async def wrapper(exec: ToolDispatchExecution, call_next: AroundNext) -> ToolResult:
        with exec.signal.open_scope():
            await trio.sleep(seconds)
        return await call_next()

    return wrapper


async def test_the_registrys_own_policy_is_innermost(autojump_clock: MockClock) -> None:
    h = harness()
    h.registry.add_around_execute(waiting_wrapper(5))
    h.registry.tool(slow, name=TOOL, timeout=1)

    # 5 s in the wrapper are not timed; the body's 0.5 s are, and fit.
    assert ok("done") == await h.execute(arguments={"seconds": 0.5})
    assert timed_out("1") == await h.execute(arguments={"seconds": 2})


async def test_an_explicit_policy_keeps_its_position(autojump_clock: MockClock) -> None:
    h = harness()
    h.registry.add_around_execute(timeout_policy())
    h.registry.add_around_execute(waiting_wrapper(5))
    h.registry.tool(slow, name=TOOL, timeout=1)

    # The explicit policy is outside the wrapper, and the registry adds none of its own.
    assert timed_out("1") == await h.execute(arguments={"seconds": 0.5})


async def test_an_explicit_policy_is_applied_once(autojump_clock: MockClock) -> None:
    h = harness()
    evaluated: list[object] = []
    signals: list[object] = []

    def timeout(args: object) -> float:
        evaluated.append(args)
        return 1.0

    async def probe(exec: ToolDispatchExecution, call_next: AroundNext) -> ToolResult:
        signals.append(exec.signal)
        return await call_next()

    h.registry.add_around_execute(probe)
    policy = h.registry.add_around_execute(timeout_policy())
    h.registry.tool(slow, name=TOOL, timeout=timeout)

    assert timed_out("1") == await h.execute(arguments={"seconds": 2})
    assert 1 == len(evaluated)
    # Removing the explicit policy brings the registry's own back, innermost.
    policy()
    assert timed_out("1") == await h.execute(arguments={"seconds": 2})
    assert 2 == len(evaluated)
    assert [h.signal, h.signal] == signals


async def test_tools_without_a_timeout_keep_the_callers_signal(autojump_clock: MockClock) -> None:
    h = harness()
    seen: list[object] = []

    @h.registry.tool(name=TOOL)
    async def body(*, ctx: ToolRunContext) -> str:
        seen.append(ctx.signal)
        return "ok"

    assert ok("ok") == await h.execute()
    assert [h.signal] == seen


async def shell(command: str, timeout: float | None = None) -> str:  # noqa: ASYNC109 - the model's
    """Runs ``command`` (here: sleeps as long as its length says)."""
    await trio.sleep(len(command))
    return f"ran {command}"


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"command": "abc", "timeout": 1}, timed_out("1")),
        ({"command": "abc", "timeout": 10}, ok("ran abc")),
        ({"command": "abc"}, ok("ran abc")),
    ],
    ids=["own-timeout-fires", "own-timeout-fits", "none-means-no-deadline"],
)
async def test_a_callable_timeout_reads_the_calls_own_arguments(
    arguments: object, expected: ToolResult, autojump_clock: MockClock
) -> None:
    h = harness()
    h.registry.tool(shell, name=TOOL, timeout=lambda args: args.timeout)

    assert expected == await h.execute(arguments=arguments)


@attrs.frozen
class ShellArgs:
    command: str
    seconds: float


async def test_a_callable_timeout_of_a_class_style_tool_gets_the_instance(
    autojump_clock: MockClock,
) -> None:
    h = harness()

    async def body(args: ShellArgs, ctx: ToolRunContext) -> str:
        await trio.sleep(10)
        return "ran"

    h.registry.register(
        ToolDefinition(name=TOOL, execute=body, args=ShellArgs, timeout=lambda a: a.seconds)
    )

    assert timed_out("2.5") == await h.execute(arguments={"command": "x", "seconds": 2.5})


def _raising(args: object) -> float:
    raise LookupError("no timeout here")


@pytest.mark.parametrize(
    ("limit", "message"),
    [
        (lambda args: 0, "timeout of tool 'tool': timeout must be a positive, finite number"),
        (lambda args: "5", "timeout of tool 'tool': timeout must be a positive, finite number"),
        (lambda args: True, "timeout of tool 'tool': timeout must be a positive, finite number"),
        (_raising, "timeout of tool 'tool' raised LookupError: no timeout here"),
    ],
    ids=["zero", "str", "bool", "raises"],
)
async def test_an_invalid_callable_timeout_is_wrapper_failed_naming_the_tool(
    limit: Any, message: str, autojump_clock: MockClock
) -> None:
    h = harness()
    ran: list[str] = []

    @h.registry.tool(name=TOOL, timeout=limit)
    async def body() -> str:
        ran.append("body")
        return "ran"

    result = await h.execute()

    assert ("ValueError", "WRAPPER_FAILED", []) == (result.error.name, result.code, ran)  # type: ignore[union-attr]
    assert result.text.startswith(f"Error: {message}")


def test_a_callable_timeout_is_accepted_at_definition() -> None:
    def timeout(args: object) -> float:
        return 1.0

    assert timeout is define_tool(slow, timeout=timeout).timeout


@pytest.mark.parametrize("option", [None, 1, "yes"])
def test_enforce_timeouts_must_be_a_bool(option: Any) -> None:
    with pytest.raises(TypeError, match="enforce_timeouts"):
        ToolRegistry(enforce_timeouts=option)


def test_thread_limiter_must_be_a_capacity_limiter() -> None:
    with pytest.raises(TypeError, match="thread_limiter"):
        ToolRegistry(thread_limiter=3)  # type: ignore[arg-type]
