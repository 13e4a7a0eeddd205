"""Results and codes (DESIGN.md §5): the value classes, the constants, and every row of the
code table produced through ``registry.execute``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from helpers_registry import TOOL, AroundNext, CodedError, Harness, PostNext, PreNext, error

import trio_tools
from trio_tools import (
    AdditionalContext,
    ApprovalRequest,
    Ask,
    Block,
    Deny,
    ErrorInfo,
    Halt,
    ImageBlock,
    PreDecision,
    TextBlock,
    ToolDispatchExecution,
    ToolExecution,
    ToolResult,
    ToolRunContext,
    define_tool,
    timeout_policy,
)


@attrs.frozen
class ReadArgs:
    path: str
    max_bytes: int = 65536


# --------------------------------------------------------------------------------------
# Constants and value classes


def test_code_constants() -> None:
    assert {
        "TOOL_ABORTED": "ABORTED",
        "TOOL_ABORTED_BEFORE_DISPATCH": "ABORTED_BEFORE_DISPATCH",
        "TOOL_TIMEOUT": "TOOL_TIMEOUT",
        "UNKNOWN_TOOL": "UNKNOWN_TOOL",
        "INVALID_ARGS": "INVALID_ARGS",
        "NOT_JSON": "NOT_JSON",
        "DENIED": "DENIED",
        "BLOCKED": "BLOCKED",
        "TOOL_FAILED": "TOOL_FAILED",
        "PRE_EXECUTE_FAILED": "PRE_EXECUTE_FAILED",
        "WRAPPER_FAILED": "WRAPPER_FAILED",
        "POST_EXECUTE_FAILED": "POST_EXECUTE_FAILED",
        "FINALIZE_FAILED": "FINALIZE_FAILED",
    } == {
        name: getattr(trio_tools, name)
        for name in [
            "TOOL_ABORTED",
            "TOOL_ABORTED_BEFORE_DISPATCH",
            "TOOL_TIMEOUT",
            "UNKNOWN_TOOL",
            "INVALID_ARGS",
            "NOT_JSON",
            "DENIED",
            "BLOCKED",
            "TOOL_FAILED",
            "PRE_EXECUTE_FAILED",
            "WRAPPER_FAILED",
            "POST_EXECUTE_FAILED",
            "FINALIZE_FAILED",
        ]
    }


def test_tool_result_defaults() -> None:
    result = ToolResult(content=[TextBlock("x")])

    assert (
        (TextBlock("x"),),
        False,
        None,
        (),
        None,
        False,
        None,
        False,
        None,
    ) == (
        result.content,
        result.is_error,
        result.error,
        result.additional_contexts,
        result.meta,
        result.concludes_turn,
        result.halt,
        result.synthetic,
        result.code,
    )


def test_tool_result_is_a_frozen_value() -> None:
    info = ErrorInfo("ValueError", "TOOL_FAILED", "boom")
    result = ToolResult(content=(TextBlock("Error: boom"),), is_error=True, error=info)

    assert ToolResult(content=[TextBlock("Error: boom")], is_error=True, error=info) == result
    assert "TOOL_FAILED" == result.code
    hash(result)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        result.is_error = False


def test_tool_result_with_error_info_must_be_an_error() -> None:
    with pytest.raises(ValueError, match="is_error"):
        ToolResult(content=(), error=ErrorInfo("E", "C", "m"))


@pytest.mark.parametrize(
    "fields",
    [
        {"content": "text"},
        {"content": ["text"]},
        {"content": (), "is_error": 1},
        {"content": (), "additional_contexts": ["text"]},
        {"content": (), "halt": "stop"},
        {"content": (), "concludes_turn": None},
        {"content": (), "synthetic": "yes"},
    ],
)
def test_tool_result_validates_its_fields(fields: dict[str, Any]) -> None:
    with pytest.raises(TypeError):
        ToolResult(**fields)


@pytest.mark.parametrize(
    "make",
    [
        lambda: TextBlock(1),
        lambda: ImageBlock("image/png", b"bytes"),
        lambda: ErrorInfo("E", None, "m"),
        lambda: Halt(None),
        lambda: AdditionalContext("t", source=1),
    ],
)
def test_small_values_validate_their_fields(make: Callable[[], object]) -> None:
    with pytest.raises(TypeError):
        make()


def test_small_values_are_frozen() -> None:
    for value, field in [
        (TextBlock("t"), "text"),
        (ImageBlock("image/png", "AA=="), "data"),
        (ErrorInfo("E", "C", "m"), "code"),
        (Halt("h"), "reason"),
        (AdditionalContext("t"), "source"),
    ]:
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            setattr(value, field, "changed")
    assert AdditionalContext("t", None) == AdditionalContext("t")


# --------------------------------------------------------------------------------------
# The code table, row by row, through execute()


async def _done(args: object, ctx: ToolRunContext) -> str:
    return "done"


async def _nan(args: object, ctx: ToolRunContext) -> object:
    return [float("nan")]


def _body(fn: Callable[[Any, ToolRunContext], Awaitable[object]]) -> Callable[[Harness], None]:
    def setup(h: Harness) -> None:
        h.registry.register(define_tool(fn, name=TOOL))

    return setup


def _deny(h: Harness) -> None:
    async def pre(execution: ToolExecution, call_next: PreNext) -> PreDecision:
        return Deny("writing outside the workspace is not allowed")

    h.registry.add_pre_execute(pre)
    _body(_done)(h)


def _guard(h: Harness) -> None:
    h.registry.add_guard(lambda execution: "rm -rf is never allowed")
    _body(_done)(h)


def _approval(answer: str | None) -> Callable[[Harness], None]:
    def setup(h: Harness) -> None:
        async def pre(execution: ToolExecution, call_next: PreNext) -> PreDecision:
            return Ask("confirm")

        async def approver(request: ApprovalRequest) -> str:
            return answer

        h.registry.add_pre_execute(pre)
        if answer is not None:
            h.registry.set_approver(approver)
        _body(_done)(h)

    return setup


def _block(h: Harness) -> None:
    async def post(execution: ToolExecution, result: ToolResult, call_next: PostNext) -> Any:
        return Block("the result mentions a secret; rephrase without it")

    h.registry.add_post_execute(post)
    _body(_done)(h)


def _typed(h: Harness) -> None:
    async def read_file(args: ReadArgs, ctx: ToolRunContext) -> str:
        return args.path

    h.registry.register(define_tool(read_file, name=TOOL))


def _pre_aborted(h: Harness) -> None:
    _body(_done)(h)
    h.source.cancel()


def _abort_in_body(h: Harness) -> None:
    async def body(args: object, ctx: ToolRunContext) -> str:
        h.source.cancel()
        await trio.lowlevel.checkpoint()
        return "unreachable"

    _body(body)(h)


CODE_TABLE = [
    pytest.param(
        _abort_in_body,
        {},
        error("AbortError", "ABORTED", "tool call aborted"),
        id="aborted",
    ),
    pytest.param(
        _pre_aborted,
        {},
        error("AbortError", "ABORTED_BEFORE_DISPATCH", "tool call aborted before dispatch"),
        id="aborted-before-dispatch",
    ),
    pytest.param(
        _body(_done),
        {"name": "write_fle"},
        error("ToolNotFoundError", "UNKNOWN_TOOL", 'unknown tool "write_fle"'),
        id="unknown-tool",
    ),
    pytest.param(
        _typed,
        {"arguments": {"max_bytes": "lots", "mode": "r"}},
        error(
            "ToolArgsError",
            "INVALID_ARGS",
            "invalid arguments: $.path: missing required field; $.max_bytes: expected int, got str",
        ),
        id="invalid-args",
    ),
    pytest.param(
        _body(_done),
        {"arguments": {"when": {1, 2}}},
        error(
            "TypeError",
            "NOT_JSON",
            "tool execution arguments must be losslessly JSON-serializable",
        ),
        id="arguments-not-json",
    ),
    pytest.param(
        _body(_nan),
        {},
        error("TypeError", "NOT_JSON", "tool result must be losslessly JSON-serializable"),
        id="result-not-json",
    ),
    pytest.param(
        _deny,
        {},
        error("ToolDeniedError", "DENIED", "writing outside the workspace is not allowed"),
        id="deny",
    ),
    pytest.param(
        _guard,
        {},
        error("ToolDeniedError", "DENIED", "rm -rf is never allowed"),
        id="guard",
    ),
    pytest.param(
        _approval("rejected"),
        {},
        error("ToolDeniedError", "DENIED", 'the user rejected tool "tool"'),
        id="approval-rejected",
    ),
    pytest.param(
        _approval("cancelled"),
        {},
        error("ToolDeniedError", "DENIED", 'approval for tool "tool" was cancelled'),
        id="approval-cancelled",
    ),
    pytest.param(
        _approval(None),
        {},
        error(
            "ToolDeniedError",
            "DENIED",
            'tool "tool" requires approval, but no approver is configured',
        ),
        id="ask-without-approver",
    ),
    pytest.param(
        _block,
        {},
        ToolResult(
            content=(TextBlock("the result mentions a secret; rephrase without it"),),
            is_error=True,
            error=ErrorInfo(
                "ToolBlockedError", "BLOCKED", "the result mentions a secret; rephrase without it"
            ),
        ),
        id="blocked",
    ),
]


@pytest.mark.parametrize(("setup", "call", "expected"), CODE_TABLE)
async def test_code_table_row(
    setup: Callable[[Harness], None], call: dict[str, Any], expected: ToolResult
) -> None:
    h = Harness()
    setup(h)

    assert expected == await h.execute(**call)


async def test_timeout_row(autojump_clock: trio.testing.MockClock) -> None:
    h = Harness()

    async def slow(args: object, ctx: ToolRunContext) -> str:
        await trio.sleep_forever()
        return "unreachable"

    h.registry.add_around_execute(timeout_policy())
    h.registry.register(define_tool(slow, name=TOOL, timeout=2.5))

    expected = error("ToolTimeoutError", "TOOL_TIMEOUT", "tool call timed out after 2.5s")
    assert expected == await h.execute()
    assert 2.5 == trio.current_time()


# Each raising stage: (where, default code).  ``raiser(h, exc)`` installs a stage raising exc.


def _raise_in_body(h: Harness, exc: Exception) -> None:
    async def body(args: object, ctx: ToolRunContext) -> str:
        raise exc

    h.registry.register(define_tool(body, name=TOOL))


def _raise_in_hook(h: Harness, exc: Exception) -> None:
    async def pre(execution: ToolExecution, call_next: PreNext) -> PreDecision:
        raise exc

    h.registry.add_pre_execute(pre)
    _body(_done)(h)


def _raise_in_wrapper(h: Harness, exc: Exception) -> None:
    async def wrapper(execution: ToolDispatchExecution, call_next: AroundNext) -> ToolResult:
        raise exc

    h.registry.add_around_execute(wrapper)
    _body(_done)(h)


def _raise_in_post(h: Harness, exc: Exception) -> None:
    async def post(execution: ToolExecution, result: ToolResult, call_next: PostNext) -> Any:
        raise exc

    h.registry.add_post_execute(post)
    _body(_done)(h)


def _raise_in_finalize(h: Harness, exc: Exception) -> None:
    def finalize(execution: ToolExecution, result: ToolResult) -> None:
        raise exc

    h.registry.register(define_tool(_done, name=TOOL, finalize_content=finalize))


RAISING_STAGES = [
    pytest.param(_raise_in_body, "TOOL_FAILED", id="body"),
    pytest.param(_raise_in_hook, "PRE_EXECUTE_FAILED", id="pre-execute"),
    pytest.param(_raise_in_wrapper, "WRAPPER_FAILED", id="wrapper"),
    pytest.param(_raise_in_post, "POST_EXECUTE_FAILED", id="post-execute"),
    pytest.param(_raise_in_finalize, "FINALIZE_FAILED", id="finalize"),
]


class ToolQuotaError(Exception):
    pass


@pytest.mark.parametrize(("install", "default_code"), RAISING_STAGES)
@pytest.mark.parametrize(
    ("exc", "name", "code", "message"),
    [
        (ToolQuotaError("quota exhausted"), "ToolQuotaError", None, "quota exhausted"),
        (CodedError("rate limited", code="RATE_LIMITED"), "CodedError", "RATE_LIMITED", None),
        (CodedError("odd code", code=429), "CodedError", None, "odd code"),
        (CodedError("", code=None), "CodedError", None, "CodedError"),
        (ToolQuotaError(), "ToolQuotaError", None, "ToolQuotaError"),
    ],
    ids=["plain", "str-code", "non-str-code", "empty-message-coded", "empty-message"],
)
async def test_a_raising_stage_is_reported_by_exception_type_code_and_message(
    install: Callable[[Harness, Exception], None],
    default_code: str,
    exc: Exception,
    name: str,
    code: str | None,
    message: str | None,
) -> None:
    h = Harness()
    install(h, exc)

    result = await h.execute()

    expected_message = str(exc) if message is None else message
    assert error(name, code or default_code, expected_message) == result


async def test_halt_from_deny_and_body_rides_on_the_result() -> None:
    h = Harness()

    async def pre(execution: ToolExecution, call_next: PreNext) -> PreDecision:
        return Deny("no", halt=Halt("the user must decide"))

    h.registry.add_pre_execute(pre)
    _body(_done)(h)

    expected = error("ToolDeniedError", "DENIED", "no", halt=Halt("the user must decide"))
    assert expected == await h.execute()


async def test_results_are_never_synthetic_when_made_by_the_registry() -> None:
    h = Harness()
    _body(_done)(h)

    results = [await h.execute(call_id="a"), await h.execute("nope", call_id="b")]
    h.source.cancel()
    results.append(await h.execute(call_id="c"))

    assert [False, False, False] == [r.synthetic for r in results]
