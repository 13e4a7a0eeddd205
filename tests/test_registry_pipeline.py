"""The registry pipeline without cancellation (DESIGN.md §2-§4): stage order and skipping,
the gate, around-execute and post-execute semantics, the body's context, finalize_content,
observers, registration and the public views."""

from __future__ import annotations

import copy
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from helpers_registry import (
    TOOL,
    AroundNext,
    CodedError,
    Harness,
    PostNext,
    PreNext,
    StageLog,
    aborted_before_dispatch,
    denied,
    error,
    not_json_arguments,
    not_json_result,
    note,
    ok,
    pass_around,
    pass_post,
    pass_pre,
    unknown_tool,
)

from trio_tools import (
    Accept,
    AdditionalContext,
    Allow,
    ApprovalRequest,
    Ask,
    Block,
    CancelSource,
    Deny,
    ErrorInfo,
    ExecutionToken,
    Halt,
    ImageBlock,
    PostDecision,
    PreDecision,
    Registration,
    TextBlock,
    ToolDefinition,
    ToolDispatchExecution,
    ToolExecution,
    ToolExecutionInput,
    ToolOutput,
    ToolRegistry,
    ToolResult,
    ToolRunContext,
    ToolSchema,
    define_tool,
)

IMAGE = ImageBlock("image/png", "iVBORw0KGgo=")


@pytest.fixture
def h() -> Harness:
    return Harness()


def add_echo(h: Harness, text: str = "done", **options: Any) -> list[object]:
    """Register the tool: it records the arguments it received and returns ``text``."""
    received: list[object] = []

    async def body(args: object, ctx: ToolRunContext) -> str:
        received.append(args)
        return text

    h.registry.tool(body, name=TOOL, **options)
    return received


def add_body(h: Harness, body: Callable[[Any, ToolRunContext], Awaitable[object]]) -> None:
    h.registry.register(define_tool(body, name=TOOL, args=None))


# --------------------------------------------------------------------------------------
# Entry: pre-aborted calls and materialisation failures (§4.1-§4.3)


async def test_pre_aborted_call_skips_every_stage_and_still_finalizes_and_publishes_once(
    h: Harness,
) -> None:
    log = StageLog(h)
    h.source.cancel("stop")

    result = await h.execute()

    assert aborted_before_dispatch() == result
    assert [] == log.calls
    assert [aborted_before_dispatch()] == log.finalized


async def test_every_stage_runs_once_in_order_on_an_ordinary_call(h: Harness) -> None:
    log = StageLog(h)

    result = await h.execute()

    assert ok("done") == result
    assert ["pre", "guard", "wrapper", "body", "post"] == log.calls
    assert [ok("done")] == log.finalized


async def test_approver_runs_for_ask_and_guards_do_not(h: Harness) -> None:
    log = StageLog(h, decision=Ask("why"))

    result = await h.execute()

    assert ok("done") == result
    assert ["pre", "approver", "wrapper", "body", "post"] == log.calls


async def test_arguments_that_are_not_json_skip_every_stage_including_post_execute(
    h: Harness,
) -> None:
    log = StageLog(h)

    result = await h.execute(arguments={"tags": {"a", "b"}})

    assert not_json_arguments() == result
    assert [] == log.calls
    assert [not_json_arguments()] == log.finalized
    assert h.executions[0].arguments is None


async def test_materialisation_failure_beats_a_pre_aborted_signal(h: Harness) -> None:
    log = StageLog(h)
    h.source.cancel()

    result = await h.execute(arguments=[float("nan")])

    assert not_json_arguments() == result
    assert [] == log.calls
    assert [not_json_arguments()] == log.finalized


async def test_materialisation_failure_beats_an_unknown_tool(h: Harness) -> None:
    assert not_json_arguments() == await h.execute("nope", arguments={1: "x"})


async def test_pre_aborted_beats_an_unknown_tool(h: Harness) -> None:
    h.source.cancel()

    assert aborted_before_dispatch() == await h.execute("nope")


async def test_unknown_tool_skips_gate_and_dispatch_but_runs_post_execute(h: Harness) -> None:
    log = StageLog(h)

    result = await h.execute("nope")

    assert unknown_tool("nope") == result
    assert ["post"] == log.calls
    assert h.executions[0].definition is None


async def test_invalid_arguments_skip_gate_and_dispatch_but_run_post_execute(h: Harness) -> None:
    calls: list[str] = []

    async def post(execution: ToolExecution, result: ToolResult, call_next: PostNext) -> Accept:
        calls.append("post")
        return Accept()

    async def pre(execution: ToolExecution, call_next: PreNext) -> PreDecision:
        calls.append("pre")
        return await call_next()

    h.registry.register(
        ToolDefinition(
            name=TOOL, execute=_never_called, args=ExactArgs, parameters={"type": "object"}
        )
    )
    h.registry.add_pre_execute(pre)
    h.registry.add_post_execute(post)

    result = await h.execute(arguments={"n": "1"})

    expected = error(
        "ToolArgsError", "INVALID_ARGS", "invalid arguments: $.n: expected int, got str"
    )
    assert expected == result
    assert ["post"] == calls


@attrs.frozen
class ExactArgs:
    n: int


async def _never_called(args: object, ctx: ToolRunContext) -> str:
    raise AssertionError("the body must not run")


# --------------------------------------------------------------------------------------
# The gate: pre-execute, guards, approval (§4.4)


async def test_guards_run_after_allow_in_order_and_the_first_reason_denies(h: Harness) -> None:
    calls: list[str] = []

    def guard(name: str, reason: str | None) -> Callable[[ToolExecution], str | None]:
        def check(execution: ToolExecution) -> str | None:
            calls.append(name)
            return reason

        return check

    h.registry.add_guard(guard("first", None))
    h.registry.add_guard(guard("second", "path is outside the workspace"))
    h.registry.add_guard(guard("third", "never asked"))
    add_echo(h)

    result = await h.execute()

    assert denied("path is outside the workspace") == result
    assert ["first", "second"] == calls


async def test_guards_do_not_run_after_a_granted_ask(h: Harness) -> None:
    calls: list[str] = []

    async def pre(execution: ToolExecution, call_next: PreNext) -> PreDecision:
        return Ask("confirm")

    async def approver(request: ApprovalRequest) -> str:
        calls.append("approver")
        return "granted"

    def guard(execution: ToolExecution) -> str:
        calls.append("guard")
        return "a guard would deny"

    h.registry.add_pre_execute(pre)
    h.registry.set_approver(approver)
    h.registry.add_guard(guard)
    add_echo(h)

    assert ok("done") == await h.execute()
    assert ["approver"] == calls


async def test_guards_do_not_run_after_deny(h: Harness) -> None:
    calls: list[str] = []

    async def pre(execution: ToolExecution, call_next: PreNext) -> PreDecision:
        return Deny("not today")

    h.registry.add_pre_execute(pre)
    h.registry.add_guard(lambda execution: calls.append("guard"))
    add_echo(h)

    assert denied("not today") == await h.execute()
    assert [] == calls


async def test_approver_gets_the_read_only_execution_and_the_hooks_reason(h: Harness) -> None:
    requests: list[ApprovalRequest] = []
    executions: list[ToolExecution] = []

    async def pre(execution: ToolExecution, call_next: PreNext) -> PreDecision:
        executions.append(execution)
        return Ask("writes a file")

    async def approver(request: ApprovalRequest) -> str:
        requests.append(request)
        return "granted"

    h.registry.add_pre_execute(pre)
    h.registry.set_approver(approver)
    add_echo(h)

    await h.execute()

    assert [ApprovalRequest(executions[0], "writes a file")] == requests
    assert type(requests[0].execution) is ToolExecution


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ("granted", ok("done")),
        ("rejected", denied('the user rejected tool "tool"')),
        ("cancelled", denied('approval for tool "tool" was cancelled')),
    ],
)
async def test_approver_answers(h: Harness, answer: str, expected: ToolResult) -> None:
    async def pre(execution: ToolExecution, call_next: PreNext) -> PreDecision:
        return Ask()

    async def approver(request: ApprovalRequest) -> str:
        return answer

    h.registry.add_pre_execute(pre)
    h.registry.set_approver(approver)
    add_echo(h)

    assert expected == await h.execute()


async def test_ask_without_an_approver_is_denied(h: Harness) -> None:
    async def pre(execution: ToolExecution, call_next: PreNext) -> PreDecision:
        return Ask("confirm")

    h.registry.add_pre_execute(pre)
    add_echo(h)

    expected = denied('tool "tool" requires approval, but no approver is configured')
    assert expected == await h.execute()


async def test_set_approver_none_removes_the_approver(h: Harness) -> None:
    async def pre(execution: ToolExecution, call_next: PreNext) -> PreDecision:
        return Ask()

    async def approver(request: ApprovalRequest) -> str:
        return "granted"

    h.registry.add_pre_execute(pre)
    h.registry.set_approver(approver)
    h.registry.set_approver(None)
    add_echo(h)

    expected = denied('tool "tool" requires approval, but no approver is configured')
    assert expected == await h.execute()


async def test_approver_registration_removes_only_the_approver_it_set(h: Harness) -> None:
    async def pre(execution: ToolExecution, call_next: PreNext) -> PreDecision:
        return Ask()

    async def grant(request: ApprovalRequest) -> str:
        return "granted"

    async def reject(request: ApprovalRequest) -> str:
        return "rejected"

    h.registry.add_pre_execute(pre)
    add_echo(h)
    first = h.registry.set_approver(grant)
    second = h.registry.set_approver(reject)

    first()
    assert denied('the user rejected tool "tool"') == await h.execute(call_id="a")
    second()
    expected = denied('tool "tool" requires approval, but no approver is configured')
    assert expected == await h.execute(call_id="b")


async def test_deny_halt_is_kept_on_the_denial(h: Harness) -> None:
    async def pre(execution: ToolExecution, call_next: PreNext) -> PreDecision:
        return Deny("dangerous", halt=Halt("stop the turn"))

    h.registry.add_pre_execute(pre)
    add_echo(h)

    assert denied("dangerous", halt=Halt("stop the turn")) == await h.execute()


def _raising_hook(h: Harness, exc: Exception) -> None:
    async def pre(execution: ToolExecution, call_next: PreNext) -> PreDecision:
        raise exc

    h.registry.add_pre_execute(pre)


def _raising_guard(h: Harness, exc: Exception) -> None:
    def guard(execution: ToolExecution) -> str | None:
        raise exc

    h.registry.add_guard(guard)


def _raising_approver(h: Harness, exc: Exception) -> None:
    async def pre(execution: ToolExecution, call_next: PreNext) -> PreDecision:
        return Ask()

    async def approver(request: ApprovalRequest) -> str:
        raise exc

    h.registry.add_pre_execute(pre)
    h.registry.set_approver(approver)


@pytest.mark.parametrize("install", [_raising_hook, _raising_guard, _raising_approver])
async def test_a_raising_gate_stage_is_a_final_pre_execute_failure(
    h: Harness, install: Callable[[Harness, Exception], None]
) -> None:
    post_calls: list[ToolResult] = []

    async def post(execution: ToolExecution, result: ToolResult, call_next: PostNext) -> Accept:
        post_calls.append(result)
        return Accept()

    install(h, ValueError("policy store unreachable"))
    h.registry.add_post_execute(post)
    received = add_echo(h)

    result = await h.execute()

    assert error("ValueError", "PRE_EXECUTE_FAILED", "policy store unreachable") == result
    assert [] == post_calls
    assert [] == received


@pytest.mark.parametrize("install", [_raising_hook, _raising_guard, _raising_approver])
async def test_a_str_code_on_a_gate_exception_wins(
    h: Harness, install: Callable[[Harness, Exception], None]
) -> None:
    install(h, CodedError("quota exhausted", code="QUOTA"))
    add_echo(h)

    assert error("CodedError", "QUOTA", "quota exhausted") == await h.execute()


@pytest.mark.parametrize(
    "decision", [None, "Allow", Accept(), TextBlock("allow")], ids=["none", "str", "post", "block"]
)
async def test_a_pre_execute_chain_returning_no_decision_is_a_pre_execute_failure(
    h: Harness, decision: object
) -> None:
    async def pre(execution: ToolExecution, call_next: PreNext) -> Any:
        return decision

    h.registry.add_pre_execute(pre)
    add_echo(h)

    result = await h.execute()

    assert ("TypeError", "PRE_EXECUTE_FAILED") == (result.error.name, result.error.code)


async def test_an_approver_answering_something_else_is_a_pre_execute_failure(h: Harness) -> None:
    async def pre(execution: ToolExecution, call_next: PreNext) -> PreDecision:
        return Ask()

    async def approver(request: ApprovalRequest) -> str:
        return "yes"

    h.registry.add_pre_execute(pre)
    h.registry.set_approver(approver)
    add_echo(h)

    result = await h.execute()

    assert ("TypeError", "PRE_EXECUTE_FAILED") == (result.error.name, result.error.code)


async def test_a_guard_returning_a_non_str_reason_is_a_pre_execute_failure(h: Harness) -> None:
    h.registry.add_guard(lambda execution: 42)
    add_echo(h)

    result = await h.execute()

    assert ("TypeError", "PRE_EXECUTE_FAILED") == (result.error.name, result.error.code)


# --------------------------------------------------------------------------------------
# Middleware: order and call_next (§3)


async def test_middleware_runs_in_registration_order_first_registered_outermost(
    h: Harness,
) -> None:
    calls: list[str] = []

    def pre(label: str) -> Callable[[ToolExecution, PreNext], Awaitable[PreDecision]]:
        async def hook(execution: ToolExecution, call_next: PreNext) -> PreDecision:
            calls.append(f"pre {label} in")
            decision = await call_next()
            calls.append(f"pre {label} out")
            return decision

        return hook

    def around(label: str) -> Callable[[ToolDispatchExecution, AroundNext], Awaitable[ToolResult]]:
        async def wrapper(execution: ToolDispatchExecution, call_next: AroundNext) -> ToolResult:
            calls.append(f"around {label} in")
            result = await call_next()
            calls.append(f"around {label} out")
            return result

        return wrapper

    def post(
        label: str,
    ) -> Callable[[ToolExecution, ToolResult, PostNext], Awaitable[PostDecision]]:
        async def hook(execution: ToolExecution, result: ToolResult, call_next: PostNext) -> Any:
            calls.append(f"post {label} in")
            decision = await call_next()
            calls.append(f"post {label} out")
            return decision

        return hook

    async def body(args: object, ctx: ToolRunContext) -> str:
        calls.append("body")
        return "done"

    for label in ("1", "2"):
        h.registry.add_pre_execute(pre(label))
        h.registry.add_around_execute(around(label))
        h.registry.add_post_execute(post(label))
    add_body(h, body)

    await h.execute()

    assert [
        "pre 1 in",
        "pre 2 in",
        "pre 2 out",
        "pre 1 out",
        "around 1 in",
        "around 2 in",
        "body",
        "around 2 out",
        "around 1 out",
        "post 1 in",
        "post 2 in",
        "post 2 out",
        "post 1 out",
    ] == calls


async def test_an_outer_pre_execute_hook_sees_and_may_override_the_inner_decision(
    h: Harness,
) -> None:
    async def outer(execution: ToolExecution, call_next: PreNext) -> PreDecision:
        inner = await call_next()
        assert Deny("inner says no") == inner
        return Allow()

    async def inner(execution: ToolExecution, call_next: PreNext) -> PreDecision:
        return Deny("inner says no")

    h.registry.add_pre_execute(outer)
    h.registry.add_pre_execute(inner)
    add_echo(h)

    assert ok("done") == await h.execute()


async def test_chain_ends_return_allow_and_accept(h: Harness) -> None:
    seen: list[object] = []

    async def pre(execution: ToolExecution, call_next: PreNext) -> PreDecision:
        decision = await call_next()
        seen.append(decision)
        return decision

    async def post(execution: ToolExecution, result: ToolResult, call_next: PostNext) -> Any:
        decision = await call_next()
        seen.append(decision)
        return decision

    h.registry.add_pre_execute(pre)
    h.registry.add_post_execute(post)
    add_echo(h)

    await h.execute()

    assert [Allow(), Accept()] == seen


async def _twice_pre(execution: ToolExecution, call_next: PreNext) -> PreDecision:
    await call_next()
    return await call_next()


async def _twice_around(execution: ToolDispatchExecution, call_next: AroundNext) -> ToolResult:
    await call_next()
    return await call_next()


async def _twice_post(execution: ToolExecution, result: ToolResult, call_next: PostNext) -> Any:
    await call_next()
    return await call_next()


@pytest.mark.parametrize("behind", [False, True], ids=["first", "behind another"])
@pytest.mark.parametrize(
    ("stage", "hook", "through", "code"),
    [
        ("pre", _twice_pre, pass_pre, "PRE_EXECUTE_FAILED"),
        ("around", _twice_around, pass_around, "WRAPPER_FAILED"),
        ("post", _twice_post, pass_post, "POST_EXECUTE_FAILED"),
    ],
)
async def test_calling_call_next_twice_raises_and_is_the_stages_failure(
    h: Harness, stage: str, hook: Any, through: Any, code: str, behind: bool
) -> None:
    """The first stage's ``call_next`` (the chain itself) and a later stage's alike."""
    add = {"pre": h.registry.add_pre_execute, "around": h.registry.add_around_execute}.get(
        stage, h.registry.add_post_execute
    )
    if behind:
        add(through)
    add(hook)
    received = add_echo(h)

    result = await h.execute()

    assert error("RuntimeError", code, "call_next() may be called only once") == result
    assert len(received) == (1 if stage != "pre" else 0)


async def test_stage_registrations_are_undone_by_call_and_by_context_manager(h: Harness) -> None:
    calls: list[str] = []

    async def pre(execution: ToolExecution, call_next: PreNext) -> PreDecision:
        calls.append("pre")
        return await call_next()

    async def wrapper(execution: ToolDispatchExecution, call_next: AroundNext) -> ToolResult:
        calls.append("around")
        return await call_next()

    async def post(execution: ToolExecution, result: ToolResult, call_next: PostNext) -> Any:
        calls.append("post")
        return await call_next()

    def observer(execution: ToolExecution, result: ToolResult) -> None:
        calls.append("observer")

    def guard(execution: ToolExecution) -> None:
        calls.append("guard")

    add_echo(h)
    registrations = [
        h.registry.add_pre_execute(pre),
        h.registry.add_around_execute(wrapper),
        h.registry.add_post_execute(post),
        h.registry.add_observer(observer),
        h.registry.add_guard(guard),
    ]
    await h.execute(call_id="a")
    assert ["pre", "guard", "around", "post", "observer"] == calls
    assert all(isinstance(r, Registration) and r.active for r in registrations)

    for registration in registrations[:3]:
        registration()
        registration()  # idempotent
    with registrations[3], registrations[4]:
        pass
    registrations[3]()
    calls.clear()
    await h.execute(call_id="b")

    assert [] == calls
    assert not any(r.active for r in registrations)


async def test_the_same_hook_registered_twice_runs_twice_and_unregisters_separately(
    h: Harness,
) -> None:
    calls: list[str] = []

    async def pre(execution: ToolExecution, call_next: PreNext) -> PreDecision:
        calls.append("pre")
        return await call_next()

    add_echo(h)
    first = h.registry.add_pre_execute(pre)
    h.registry.add_pre_execute(pre)
    first()

    await h.execute()

    assert ["pre"] == calls


def test_registration_cannot_be_constructed() -> None:
    with pytest.raises(TypeError):
        Registration(lambda: None)


# --------------------------------------------------------------------------------------
# Around-execute (§4.5)


async def test_wrapper_short_circuit_skips_the_body_and_reaches_post_execute(h: Harness) -> None:
    post_saw: list[ToolResult] = []

    async def wrapper(execution: ToolDispatchExecution, call_next: AroundNext) -> ToolResult:
        return ok("cached")

    async def post(execution: ToolExecution, result: ToolResult, call_next: PostNext) -> Any:
        post_saw.append(result)
        return await call_next()

    h.registry.add_around_execute(wrapper)
    h.registry.add_post_execute(post)
    received = add_echo(h)

    assert ok("cached") == await h.execute()
    assert [ok("cached")] == post_saw
    assert [] == received


async def test_wrapper_may_replace_the_result(h: Harness) -> None:
    async def wrapper(execution: ToolDispatchExecution, call_next: AroundNext) -> ToolResult:
        result = await call_next()
        return ok(f"wrapped {result.content[0].text}")

    h.registry.add_around_execute(wrapper)
    add_echo(h)

    assert ok("wrapped done") == await h.execute()


async def test_a_raising_wrapper_is_a_final_wrapper_failure(h: Harness) -> None:
    post_calls: list[ToolResult] = []

    async def wrapper(execution: ToolDispatchExecution, call_next: AroundNext) -> ToolResult:
        await call_next()
        raise CodedError("sandbox crashed", code=None)

    async def post(execution: ToolExecution, result: ToolResult, call_next: PostNext) -> Any:
        post_calls.append(result)
        return await call_next()

    async def body(args: object, ctx: ToolRunContext) -> str:
        ctx.defer_context(note("body"))
        return "done"

    h.registry.add_around_execute(wrapper)
    h.registry.add_post_execute(post)
    add_body(h, body)

    # A final stage failure keeps no deferred contexts (§4 "Contexts deferred by the body").
    assert error("CodedError", "WRAPPER_FAILED", "sandbox crashed") == await h.execute()
    assert [] == post_calls


@pytest.mark.parametrize("value", [None, "done", ok("x").content, Accept()])
async def test_a_wrapper_returning_something_else_than_a_tool_result_is_a_wrapper_failure(
    h: Harness, value: object
) -> None:
    post_calls: list[ToolResult] = []

    async def wrapper(execution: ToolDispatchExecution, call_next: AroundNext) -> Any:
        await call_next()
        return value

    async def post(execution: ToolExecution, result: ToolResult, call_next: PostNext) -> Any:
        post_calls.append(result)
        return await call_next()

    h.registry.add_around_execute(wrapper)
    h.registry.add_post_execute(post)
    add_echo(h)

    result = await h.execute()

    assert ("TypeError", "WRAPPER_FAILED") == (result.error.name, result.error.code)
    assert (TextBlock(f"Error: {result.error.message}"),) == result.content
    assert [] == post_calls


# --------------------------------------------------------------------------------------
# Post-execute (§4.6)


def add_post(h: Harness, decision: PostDecision) -> list[ToolResult]:
    seen: list[ToolResult] = []

    async def post(execution: ToolExecution, result: ToolResult, call_next: PostNext) -> Any:
        seen.append(result)
        return decision

    h.registry.add_post_execute(post)
    return seen


async def test_accept_content_on_an_error_replaces_the_content_and_keeps_the_error(
    h: Harness,
) -> None:
    add_post(h, Accept(content=[TextBlock("try `read_file` instead")]))

    result = await h.execute("nope")

    expected = error(
        "ToolNotFoundError",
        "UNKNOWN_TOOL",
        'unknown tool "nope"',
        content=(TextBlock("try `read_file` instead"),),
    )
    assert expected == result


async def test_accept_content_replaces_a_success(h: Harness) -> None:
    add_post(h, Accept(content=[TextBlock("redacted"), IMAGE]))
    add_echo(h)

    assert ToolResult(content=(TextBlock("redacted"), IMAGE)) == await h.execute()


async def test_contexts_come_from_body_then_wrapper_then_post_execute(h: Harness) -> None:
    async def body(args: object, ctx: ToolRunContext) -> str:
        ctx.defer_context(note("body 1"))
        ctx.defer_context(note("body 2"))
        return "done"

    async def replacing(execution: ToolDispatchExecution, call_next: AroundNext) -> ToolResult:
        await call_next()  # drops the body's contexts: the registry keeps them anyway
        return ok("replaced", contexts=[note("outer wrapper")])

    async def amending(execution: ToolDispatchExecution, call_next: AroundNext) -> ToolResult:
        result = await call_next()
        return attrs.evolve(
            result, additional_contexts=(*result.additional_contexts, note("inner wrapper"))
        )

    h.registry.add_around_execute(replacing)
    h.registry.add_around_execute(amending)
    add_post(h, Accept(additional_contexts=[note("post 1"), note("post 2")]))
    add_body(h, body)

    result = await h.execute()

    expected = ok(
        "replaced",
        contexts=[
            note("body 1"),
            note("body 2"),
            note("outer wrapper"),
            note("post 1"),
            note("post 2"),
        ],
    )
    assert expected == result


async def test_block_with_text_feedback_is_blocked_with_only_the_blockers_contexts(
    h: Harness,
) -> None:
    async def body(args: object, ctx: ToolRunContext) -> str:
        ctx.defer_context(note("body"))
        return "secret"

    add_post(h, Block("the output contained a credential", additional_contexts=[note("post")]))
    add_body(h, body)

    result = await h.execute()

    expected = ToolResult(
        content=(TextBlock("the output contained a credential"),),
        is_error=True,
        error=_blocked("the output contained a credential"),
        additional_contexts=(note("post"),),
    )
    assert expected == result


def _blocked(message: str) -> ErrorInfo:
    return ErrorInfo("ToolBlockedError", "BLOCKED", message)


@pytest.mark.parametrize(
    ("feedback", "message"),
    [
        ([TextBlock("line one"), IMAGE, TextBlock("line two")], "line one\nline two"),
        ([IMAGE], "tool result blocked by post-execute policy"),
        ([], "tool result blocked by post-execute policy"),
        ("", "tool result blocked by post-execute policy"),
    ],
)
async def test_block_feedback_is_the_content_verbatim_and_its_text_is_the_message(
    h: Harness, feedback: Any, message: str
) -> None:
    add_post(h, Block(feedback))
    add_echo(h)

    result = await h.execute()

    content = (TextBlock(feedback),) if isinstance(feedback, str) else tuple(feedback)
    assert ToolResult(content=content, is_error=True, error=_blocked(message)) == result


async def test_block_on_an_error_result_replaces_it(h: Harness) -> None:
    add_post(h, Block("no"))

    result = await h.execute("nope")

    assert ToolResult(content=(TextBlock("no"),), is_error=True, error=_blocked("no")) == result


@pytest.mark.parametrize(
    "decision",
    [Accept(halt=Halt("post")), Block("blocked", halt=Halt("post"))],
    ids=["accept", "block"],
)
async def test_post_execute_halt_is_kept_unless_the_call_already_halted(
    h: Harness, decision: PostDecision
) -> None:
    async def body(args: object, ctx: ToolRunContext) -> str:
        if args == {"halt": True}:
            ctx.halt_turn("body")
        return "done"

    add_post(h, decision)
    add_body(h, body)

    assert Halt("post") == (await h.execute(call_id="a")).halt
    assert Halt("body") == (await h.execute(arguments={"halt": True}, call_id="b")).halt


async def test_a_raising_post_execute_hook_is_a_final_post_execute_failure(h: Harness) -> None:
    outer_saw: list[object] = []

    async def outer(execution: ToolExecution, result: ToolResult, call_next: PostNext) -> Any:
        try:
            return await call_next()
        except KeyError as exc:
            outer_saw.append(exc)
            raise

    async def inner(execution: ToolExecution, result: ToolResult, call_next: PostNext) -> Any:
        raise KeyError("audit")

    async def body(args: object, ctx: ToolRunContext) -> str:
        ctx.defer_context(note("body"))
        return "done"

    h.registry.add_post_execute(outer)
    h.registry.add_post_execute(inner)
    add_body(h, body)

    assert error("KeyError", "POST_EXECUTE_FAILED", "'audit'") == await h.execute()
    assert 1 == len(outer_saw)


async def test_a_post_execute_chain_returning_no_decision_is_a_post_execute_failure(
    h: Harness,
) -> None:
    add_post(h, Allow())
    add_echo(h)

    result = await h.execute()

    assert ("TypeError", "POST_EXECUTE_FAILED") == (result.error.name, result.error.code)


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        ({"name": "nope"}, unknown_tool("nope")),
        (
            {"arguments": {"n": "x"}},
            error("ToolArgsError", "INVALID_ARGS", "invalid arguments: $.n: expected int, got str"),
        ),
        ({"arguments": {"n": 1, "deny": True}}, denied("no")),
        ({"arguments": {"n": 1}}, ok("1")),
    ],
)
async def test_post_execute_sees_every_result_that_reached_it(
    h: Harness, call: dict[str, Any], expected: ToolResult
) -> None:
    async def pre(execution: ToolExecution, call_next: PreNext) -> PreDecision:
        if execution.arguments.get("deny"):
            return Deny("no")
        return await call_next()

    async def body(args: ExactArgs, ctx: ToolRunContext) -> str:
        return str(args.n)

    h.registry.add_pre_execute(pre)
    seen = add_post(h, Accept())
    h.registry.tool(body, name=TOOL)

    result = await h.execute(**call)

    assert expected == result
    assert [expected] == seen


# --------------------------------------------------------------------------------------
# Body return values (§3)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("hello", ToolResult(content=(TextBlock("hello"),))),
        ("", ToolResult(content=(TextBlock(""),))),
        (TextBlock("block"), ToolResult(content=(TextBlock("block"),))),
        (IMAGE, ToolResult(content=(IMAGE,))),
        ([TextBlock("a"), IMAGE], ToolResult(content=(TextBlock("a"), IMAGE))),
        ((IMAGE, TextBlock("b")), ToolResult(content=(IMAGE, TextBlock("b")))),
        ([], ToolResult(content=())),
        ((), ToolResult(content=())),
        (
            {"b": 1, "a": [1, 2.5, None, True, "x"]},
            ToolResult(content=(TextBlock('{"b":1,"a":[1,2.5,null,true,"x"]}'),)),
        ),
        ([1, "two"], ToolResult(content=(TextBlock('[1,"two"]'),))),
        (42, ToolResult(content=(TextBlock("42"),))),
        (10**30, ToolResult(content=(TextBlock(str(10**30)),))),
        (-0.0, ToolResult(content=(TextBlock("-0.0"),))),
        (None, ToolResult(content=(TextBlock("null"),))),
        (False, ToolResult(content=(TextBlock("false"),))),
        ({}, ToolResult(content=(TextBlock("{}"),))),
        ("é", ToolResult(content=(TextBlock("é"),))),
        ({"é": "ü"}, ToolResult(content=(TextBlock('{"\\u00e9":"\\u00fc"}'),))),
    ],
    ids=repr,
)
async def test_body_return_values_become_content(
    h: Harness, value: object, expected: ToolResult
) -> None:
    async def body(args: object, ctx: ToolRunContext) -> object:
        return value

    add_body(h, body)

    assert expected == await h.execute()


async def test_tool_output_carries_frozen_meta(h: Harness) -> None:
    meta = {"bytes": 12, "lines": [1, 2], "nested": {"ok": True}}

    async def body(args: object, ctx: ToolRunContext) -> ToolOutput:
        return ToolOutput(content="hello", meta=meta)

    add_body(h, body)

    result = await h.execute()

    frozen_meta = {"bytes": 12, "lines": (1, 2), "nested": {"ok": True}}
    assert ToolResult(content=(TextBlock("hello"),), meta=frozen_meta) == result
    assert isinstance(result.meta, dict)
    with pytest.raises(TypeError):
        result.meta["bytes"] = 0
    with pytest.raises(TypeError):
        result.meta["nested"]["ok"] = False
    hash(result.meta)
    assert {"bytes": 12, "lines": [1, 2], "nested": {"ok": True}} == meta  # not frozen in place


@pytest.mark.parametrize(
    ("content", "blocks"),
    [
        ([TextBlock("a"), IMAGE], (TextBlock("a"), IMAGE)),
        (IMAGE, (IMAGE,)),
        ((), ()),
    ],
)
async def test_tool_output_content_may_be_any_body_content(
    h: Harness, content: Any, blocks: tuple[Any, ...]
) -> None:
    async def body(args: object, ctx: ToolRunContext) -> ToolOutput:
        return ToolOutput(content=content, meta=[1])

    add_body(h, body)

    assert ToolResult(content=blocks, meta=(1,)) == await h.execute()


@pytest.mark.parametrize(
    "value",
    [{1, 2}, float("nan"), float("inf"), b"bytes", {"k": {1}}, [TextBlock("a"), "b"], {1: "a"}],
    ids=repr,
)
async def test_body_returning_a_non_json_value_is_not_json(h: Harness, value: object) -> None:
    async def body(args: object, ctx: ToolRunContext) -> object:
        ctx.defer_context(note("body"))
        return value

    add_body(h, body)

    assert not_json_result(contexts=[note("body")]) == await h.execute()


async def test_tool_output_with_non_json_meta_is_not_json_and_still_finalized(h: Harness) -> None:
    finalized: list[ToolResult] = []

    def finalize(execution: ToolExecution, result: ToolResult) -> None:
        finalized.append(result)

    async def body(args: object, ctx: ToolRunContext) -> ToolOutput:
        return ToolOutput(content="hello", meta={"when": {1, 2}})

    h.registry.register(define_tool(body, name=TOOL, finalize_content=finalize))

    result = await h.execute()

    assert not_json_result() == result
    assert [not_json_result()] == finalized


# --------------------------------------------------------------------------------------
# The body's context (§2)


async def test_started_work_finishes_before_the_result_is_published(
    h: Harness, autojump_clock: trio.testing.MockClock
) -> None:
    finished: list[str] = []
    at_publication: list[list[str]] = []

    async def work(label: str) -> None:
        await trio.sleep(5)
        finished.append(label)

    async def body(args: object, ctx: ToolRunContext) -> str:
        ctx.start_soon(work, "a")
        ctx.start_soon(work, "b")
        return "started"

    h.registry.add_observer(lambda execution, result: at_publication.append(list(finished)))
    add_body(h, body)

    assert ok("started") == await h.execute()
    assert [["a", "b"]] == [sorted(labels) for labels in at_publication]


async def test_an_exception_in_started_work_is_the_tools_failure(h: Harness) -> None:
    async def work() -> None:
        raise OSError("disk full")

    async def body(args: object, ctx: ToolRunContext) -> str:
        ctx.start_soon(work)
        ctx.defer_context(note("body"))
        await trio.sleep_forever()
        return "unreachable"

    add_body(h, body)

    assert (
        error("OSError", "TOOL_FAILED", "disk full", contexts=[note("body")]) == await h.execute()
    )


async def test_several_failing_tasks_of_one_call_are_one_tool_failure(h: Harness) -> None:
    async def work(message: str) -> None:
        raise ValueError(message)

    async def body(args: object, ctx: ToolRunContext) -> str:
        ctx.start_soon(work, "one")
        ctx.start_soon(work, "two")
        await trio.sleep_forever()
        return "unreachable"

    add_body(h, body)

    result = await h.execute()

    assert ("ExceptionGroup", "TOOL_FAILED", True) == (
        result.error.name,
        result.error.code,
        result.is_error,
    )
    assert "ValueError: one" in result.error.message
    assert "ValueError: two" in result.error.message


async def test_conclude_turn_marks_a_successful_result_only(h: Harness) -> None:
    async def body(args: object, ctx: ToolRunContext) -> str:
        ctx.conclude_turn()
        if args == {"fail": True}:
            raise RuntimeError("late failure")
        return "done"

    add_body(h, body)

    assert ok("done", concludes_turn=True) == await h.execute(call_id="a")
    expected = error("RuntimeError", "TOOL_FAILED", "late failure")
    assert expected == await h.execute(arguments={"fail": True}, call_id="b")


async def test_conclude_turn_is_dropped_when_post_execute_blocks(h: Harness) -> None:
    async def body(args: object, ctx: ToolRunContext) -> str:
        ctx.conclude_turn()
        return "done"

    add_post(h, Block("no"))
    add_body(h, body)

    result = await h.execute()

    assert ToolResult(content=(TextBlock("no"),), is_error=True, error=_blocked("no")) == result


async def test_halt_turn_first_halt_wins_also_on_errors(h: Harness) -> None:
    async def body(args: object, ctx: ToolRunContext) -> str:
        ctx.halt_turn("first")
        ctx.halt_turn("second")
        if args == {"fail": True}:
            raise RuntimeError("failed")
        return "done"

    add_post(h, Accept(halt=Halt("post")))
    add_body(h, body)

    assert ok("done", halt=Halt("first")) == await h.execute(call_id="a")
    expected = error("RuntimeError", "TOOL_FAILED", "failed", halt=Halt("first"))
    assert expected == await h.execute(arguments={"fail": True}, call_id="b")


async def test_report_progress_reaches_on_progress_only_while_the_body_runs(
    h: Harness,
) -> None:
    progress: list[object] = []
    contexts: list[ToolRunContext] = []

    async def work(ctx: ToolRunContext) -> None:
        await trio.lowlevel.checkpoint()
        ctx.report_progress("from started work")

    async def body(args: object, ctx: ToolRunContext) -> str:
        contexts.append(ctx)
        ctx.report_progress({"percent": 50})
        ctx.start_soon(work, ctx)
        return "done"

    async def post(execution: ToolExecution, result: ToolResult, call_next: PostNext) -> Any:
        contexts[0].report_progress("from post-execute")
        return await call_next()

    h.registry.add_post_execute(post)
    add_body(h, body)

    await h.execute(on_progress=progress.append)
    contexts[0].report_progress("after the call")

    assert [{"percent": 50}, "from started work"] == progress


async def test_report_progress_without_a_receiver_is_dropped(h: Harness) -> None:
    async def body(args: object, ctx: ToolRunContext) -> str:
        ctx.report_progress("nobody listens")
        return "done"

    add_body(h, body)

    assert ok("done") == await h.execute()


async def test_a_raising_progress_receiver_is_logged_and_changes_nothing(
    h: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    def receiver(progress: object) -> None:
        raise ValueError("receiver broke")

    async def body(args: object, ctx: ToolRunContext) -> str:
        ctx.report_progress(1)
        ctx.report_progress(2)
        return "done"

    add_body(h, body)

    with caplog.at_level(logging.ERROR, logger="trio_tools"):
        result = await h.execute(on_progress=receiver)

    assert ok("done") == result
    errors = [r for r in caplog.records if r.name == "trio_tools"]
    assert 2 == len(errors)
    assert all(isinstance(r.exc_info[1], ValueError) for r in errors)


async def test_defer_context_after_the_call_settled_raises(h: Harness) -> None:
    contexts: list[ToolRunContext] = []

    async def body(args: object, ctx: ToolRunContext) -> str:
        contexts.append(ctx)
        return "done"

    add_body(h, body)
    await h.execute()

    with pytest.raises(RuntimeError, match="settled"):
        contexts[0].defer_context(note("late"))


async def test_defer_context_rejects_anything_but_an_additional_context(h: Harness) -> None:
    async def body(args: object, ctx: ToolRunContext) -> str:
        ctx.defer_context("not a context")
        return "done"

    add_body(h, body)

    result = await h.execute()

    assert ("TypeError", "TOOL_FAILED") == (result.error.name, result.error.code)


# --------------------------------------------------------------------------------------
# finalize_content (§3, §4.7)


async def test_finalize_content_is_called_once_with_the_final_candidate(h: Harness) -> None:
    seen: list[tuple[ToolExecution, ToolResult]] = []

    def finalize(execution: ToolExecution, result: ToolResult) -> list[TextBlock]:
        seen.append((execution, result))
        return [TextBlock(f"[{result.content[0].text}]")]

    add_echo(h, finalize_content=finalize)
    add_post(h, Accept(content=[TextBlock("post")], additional_contexts=[note("post")]))

    result = await h.execute()

    assert ok("[post]", contexts=[note("post")]) == result
    assert [(h.executions[0], ok("post", contexts=[note("post")]))] == seen


async def test_finalize_content_returning_none_keeps_the_content(h: Harness) -> None:
    calls: list[ToolResult] = []

    def finalize(execution: ToolExecution, result: ToolResult) -> None:
        calls.append(result)

    add_echo(h, finalize_content=finalize)

    assert ok("done") == await h.execute()
    assert [ok("done")] == calls


async def test_finalize_content_is_applied_to_failed_calls_keeping_the_error(h: Harness) -> None:
    calls: list[ToolResult] = []

    def finalize(execution: ToolExecution, result: ToolResult) -> list[TextBlock]:
        calls.append(result)
        return [TextBlock("Error: (redacted)")]

    async def body(args: object, ctx: ToolRunContext) -> str:
        raise ValueError("secret path /home/me")

    h.registry.register(define_tool(body, name=TOOL, finalize_content=finalize))

    result = await h.execute()

    expected = error(
        "ValueError",
        "TOOL_FAILED",
        "secret path /home/me",
        content=(TextBlock("Error: (redacted)"),),
    )
    assert expected == result
    assert [error("ValueError", "TOOL_FAILED", "secret path /home/me")] == calls


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (ValueError("cannot render"), "FINALIZE_FAILED"),
        (CodedError("cannot render", code="RENDER"), "RENDER"),
        (CodedError("cannot render", code=7), "FINALIZE_FAILED"),
    ],
)
async def test_a_raising_finalize_content_is_an_error_and_is_not_called_again(
    h: Harness, exc: Exception, code: str
) -> None:
    calls: list[ToolResult] = []

    def finalize(execution: ToolExecution, result: ToolResult) -> None:
        calls.append(result)
        raise exc

    async def body(args: object, ctx: ToolRunContext) -> str:
        ctx.defer_context(note("body"))
        return "done"

    h.registry.register(define_tool(body, name=TOOL, finalize_content=finalize))

    result = await h.execute()

    expected = error(type(exc).__name__, code, "cannot render", contexts=[note("body")])
    assert expected == result
    assert 1 == len(calls)


async def test_finalize_content_returning_invalid_content_is_a_finalize_failure(
    h: Harness,
) -> None:
    add_echo(h, finalize_content=lambda execution, result: "not blocks")

    result = await h.execute()

    assert ("TypeError", "FINALIZE_FAILED") == (result.error.name, result.error.code)


async def test_finalize_content_is_captured_at_entry(h: Harness) -> None:
    calls: list[str] = []
    registrations: list[Registration] = []

    async def body(args: object, ctx: ToolRunContext) -> str:
        registrations[0]()
        h.registry.register(
            define_tool(body, name=TOOL, finalize_content=lambda e, r: calls.append("new"))
        )
        return "done"

    def finalize(execution: ToolExecution, result: ToolResult) -> list[TextBlock]:
        calls.append("old")
        return [TextBlock("finalized")]

    definition = define_tool(body, name=TOOL, finalize_content=finalize)
    registrations.append(h.registry.register(definition))

    result = await h.execute()

    assert ok("finalized") == result
    assert ["old"] == calls
    assert h.executions[0].definition is definition
    assert h.registry.get(TOOL) is not definition


async def test_unregistering_the_tool_mid_call_does_not_affect_that_call(h: Harness) -> None:
    registrations: list[Registration] = []

    async def body(args: object, ctx: ToolRunContext) -> str:
        registrations[0]()
        return "done"

    definition = define_tool(body, name=TOOL)
    registrations.append(h.registry.register(definition))

    assert ok("done") == await h.execute(call_id="a")
    assert unknown_tool(TOOL) == await h.execute(call_id="b")
    assert [definition, None] == [execution.definition for execution in h.executions]


# --------------------------------------------------------------------------------------
# Result observers (§4.7)


async def test_every_observer_sync_and_async_sees_the_returned_object(h: Harness) -> None:
    seen: list[tuple[str, ToolExecution, ToolResult]] = []

    def sync_observer(execution: ToolExecution, result: ToolResult) -> None:
        seen.append(("sync", execution, result))

    async def async_observer(execution: ToolExecution, result: ToolResult) -> None:
        await trio.lowlevel.checkpoint()
        seen.append(("async", execution, result))

    h.registry.add_observer(sync_observer)
    h.registry.add_observer(async_observer)
    add_echo(h)

    result = await h.execute()

    assert ["sync", "async"] == [label for label, _, _ in seen]
    assert all(r is result for _, _, r in seen)
    assert all(e is h.executions[0] for _, e, _ in seen)


@pytest.mark.parametrize("is_async", [False, True])
async def test_a_raising_observer_is_logged_and_changes_nothing(
    h: Harness, caplog: pytest.LogCaptureFixture, is_async: bool
) -> None:
    later: list[ToolResult] = []

    def sync_observer(execution: ToolExecution, result: ToolResult) -> None:
        raise ValueError("observer broke")

    async def async_observer(execution: ToolExecution, result: ToolResult) -> None:
        await trio.lowlevel.checkpoint()
        raise ValueError("observer broke")

    h.registry.add_observer(async_observer if is_async else sync_observer)
    h.registry.add_observer(lambda execution, result: later.append(result))
    add_echo(h)

    with caplog.at_level(logging.ERROR, logger="trio_tools"):
        result = await h.execute()

    assert ok("done") == result
    assert [result] == later
    errors = [r for r in caplog.records if r.name == "trio_tools"]
    assert 1 == len(errors)
    assert isinstance(errors[0].exc_info[1], ValueError)


async def test_observers_see_pre_aborted_and_not_json_calls(h: Harness) -> None:
    add_echo(h)

    await h.execute(arguments=[{1, 2}], call_id="a")
    h.source.cancel()
    await h.execute(call_id="b")

    assert [not_json_arguments(), aborted_before_dispatch()] == h.published


# --------------------------------------------------------------------------------------
# Registration, schemas, execution mode (§3)


async def test_register_returns_a_registration_that_unregisters_idempotently(h: Harness) -> None:
    definition = define_tool(_never_called, name="t")

    registration = h.registry.register(definition)
    assert h.registry.get("t") is definition
    registration()
    registration()
    assert h.registry.get("t") is None

    with h.registry.register(definition) as again:
        assert h.registry.get("t") is definition
        assert again.active
    assert h.registry.get("t") is None
    assert not again.active
    again()


def test_a_stale_registration_does_not_remove_a_newer_tool_of_the_same_name() -> None:
    registry = ToolRegistry()
    first = define_tool(_never_called, name="t")
    second = define_tool(_never_called, name="t")
    stale = registry.register(first)
    stale()
    registry.register(second)

    stale()

    assert registry.get("t") is second


def test_duplicate_tool_names_raise_value_error() -> None:
    registry = ToolRegistry()
    registry.register(define_tool(_never_called, name="t"))

    with pytest.raises(ValueError, match="already registered"):
        registry.register(define_tool(_never_called, name="t"))

    @registry.tool(name="u")
    async def u(args: object, ctx: ToolRunContext) -> str:
        return "u"

    with pytest.raises(ValueError, match="already registered"):
        registry.tool(u.execute, name="u")


def test_tool_decorator_defines_and_registers() -> None:
    registry = ToolRegistry()

    @registry.tool(timeout=5.0, concurrency_safe=True)
    async def read_file(args: ExactArgs, ctx: ToolRunContext) -> str:
        """Read a file."""
        return "x"

    assert isinstance(read_file, ToolDefinition)
    assert registry.get("read_file") is read_file
    assert (5.0, True, ExactArgs) == (read_file.timeout, read_file.concurrency_safe, read_file.args)


def test_schemas_hold_only_name_description_and_parameters() -> None:
    registry = ToolRegistry()

    @registry.tool(timeout=5.0, concurrency_safe=True, finalize_content=lambda e, r: None)
    async def first(args: ExactArgs, ctx: ToolRunContext) -> str:
        """The first tool."""
        return "x"

    registry.register(
        ToolDefinition(
            name="second",
            execute=_never_called,
            parameters={"type": "object", "properties": {"q": {"type": "string"}}},
        )
    )

    expected = (
        ToolSchema(
            name="first",
            description="The first tool.",
            parameters={
                "title": "ExactArgs",
                "type": "object",
                "properties": {"n": {"type": "integer"}},
                "required": ("n",),
            },
        ),
        ToolSchema(
            name="second",
            description="",
            parameters={"type": "object", "properties": {"q": {"type": "string"}}},
        ),
    )
    assert expected == registry.schemas()
    assert ["name", "description", "parameters"] == [a.name for a in attrs.fields(ToolSchema)]


def _mode(flag: Any, arguments: object = None, name: str = TOOL) -> str:
    registry = ToolRegistry()
    registry.register(define_tool(_never_called, name=TOOL, concurrency_safe=flag))
    signal = CancelSource().signal
    call = ToolExecutionInput(
        call_id="c", name=name, arguments={} if arguments is None else arguments, signal=signal
    )
    return registry.execution_mode(call)


def _raises(args: object) -> bool:
    raise RuntimeError("cannot tell")


@pytest.mark.parametrize(
    ("flag", "expected"),
    [
        (True, "parallel"),
        (False, "exclusive"),
        (lambda args: True, "parallel"),
        (lambda args: False, "exclusive"),
        (lambda args: 1, "exclusive"),
        (lambda args: "yes", "exclusive"),
        (lambda args: None, "exclusive"),
    ],
)
def test_execution_mode_is_parallel_only_for_exactly_true(flag: Any, expected: str) -> None:
    assert expected == _mode(flag)


def test_execution_mode_with_a_raising_callable_is_exclusive(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.ERROR, logger="trio_tools"):
        assert "exclusive" == _mode(_raises)


def test_execution_mode_of_an_unknown_tool_is_exclusive() -> None:
    assert "exclusive" == _mode(True, name="nope")


def test_execution_mode_callable_gets_the_parsed_arguments_or_the_raw_snapshot() -> None:
    seen: list[object] = []

    def flag(args: object) -> bool:
        seen.append(args)
        return True

    registry = ToolRegistry()
    registry.register(define_tool(_never_called, name="raw", concurrency_safe=flag))
    registry.register(
        define_tool(_never_called, name="typed", args=ExactArgs, concurrency_safe=flag)
    )
    signal = CancelSource().signal

    raw = ToolExecutionInput(call_id="1", name="raw", arguments={"a": [1]}, signal=signal)
    typed = ToolExecutionInput(call_id="2", name="typed", arguments={"n": 3}, signal=signal)
    invalid = ToolExecutionInput(call_id="3", name="typed", arguments={"n": "x"}, signal=signal)

    assert "parallel" == registry.execution_mode(raw)
    assert "parallel" == registry.execution_mode(typed)
    assert "exclusive" == registry.execution_mode(invalid)
    assert [{"a": (1,)}, ExactArgs(3)] == seen
    with pytest.raises(TypeError):
        seen[0]["a"] = 2


# --------------------------------------------------------------------------------------
# Public views, tokens, input (§2)


@pytest.mark.parametrize(
    "cls", [ToolExecution, ToolDispatchExecution, ToolRunContext, ExecutionToken]
)
def test_views_and_tokens_cannot_be_constructed(cls: type) -> None:
    with pytest.raises(TypeError, match="cannot be constructed"):
        cls()
    with pytest.raises(TypeError, match="cannot be constructed"):
        cls(object())


_VIEW_FIELDS = ["call_id", "name", "arguments", "signal", "token", "parent", "agent", "definition"]


async def test_views_are_immutable_at_run_time(h: Harness) -> None:
    views: dict[str, Any] = {}

    async def pre(execution: ToolExecution, call_next: PreNext) -> PreDecision:
        views["pre"] = execution
        return await call_next()

    async def wrapper(execution: ToolDispatchExecution, call_next: AroundNext) -> ToolResult:
        views["around"] = execution
        return await call_next()

    async def body(args: object, ctx: ToolRunContext) -> str:
        views["body"] = ctx
        return "done"

    h.registry.add_pre_execute(pre)
    h.registry.add_around_execute(wrapper)
    add_body(h, body)
    await h.execute()

    for stage, view in views.items():
        for field in [*_VIEW_FIELDS, "new_attribute"]:
            if stage == "around" and field == "signal":
                continue
            with pytest.raises(AttributeError):
                setattr(view, field, None)
            if hasattr(view, field):
                with pytest.raises(AttributeError):
                    delattr(view, field)
    for method in ["start_soon", "defer_context", "report_progress", "conclude_turn", "halt_turn"]:
        with pytest.raises(AttributeError):
            setattr(views["body"], method, None)
    token = views["body"].token
    with pytest.raises(AttributeError):
        token.anything = 1


async def test_dispatch_signal_accepts_only_a_cancel_signal_and_cannot_be_deleted(
    h: Harness,
) -> None:
    outcomes: list[str] = []

    async def wrapper(execution: ToolDispatchExecution, call_next: AroundNext) -> ToolResult:
        for bad in [None, CancelSource(), "signal"]:
            try:
                execution.signal = bad
            except TypeError:
                outcomes.append("TypeError")
        try:
            del execution.signal
        except AttributeError:
            outcomes.append("AttributeError")
        assert execution.signal is h.signal
        return await call_next()

    h.registry.add_around_execute(wrapper)
    add_echo(h)

    assert ok("done") == await h.execute()
    assert ["TypeError", "TypeError", "TypeError", "AttributeError"] == outcomes


async def test_every_stage_sees_the_same_call_fields_and_token(h: Harness) -> None:
    seen: list[tuple[Any, ...]] = []
    agent = object()
    parent_token: list[ExecutionToken] = []

    def record(view: Any) -> None:
        seen.append(
            (
                view.call_id,
                view.name,
                view.arguments,
                view.token,
                view.parent,
                view.agent,
                view.definition,
            )
        )

    async def pre(execution: ToolExecution, call_next: PreNext) -> PreDecision:
        record(execution)
        return await call_next()

    async def wrapper(execution: ToolDispatchExecution, call_next: AroundNext) -> ToolResult:
        record(execution)
        return await call_next()

    async def post(execution: ToolExecution, result: ToolResult, call_next: PostNext) -> Any:
        record(execution)
        return await call_next()

    async def body(args: object, ctx: ToolRunContext) -> str:
        record(ctx)
        return "done"

    async def outer(args: object, ctx: ToolRunContext) -> str:
        parent_token.append(ctx.token)
        nested = ToolExecutionInput(
            call_id="nested",
            name=TOOL,
            arguments={"x": [1]},
            signal=ctx.signal,
            agent=agent,
            parent=ctx.token,
        )
        result = await h.registry.execute(nested)
        return result.content[0].text

    h.registry.add_pre_execute(pre)
    h.registry.add_around_execute(wrapper)
    h.registry.add_post_execute(post)
    definition = define_tool(body, name=TOOL)
    h.registry.register(definition)
    h.registry.register(define_tool(outer, name="outer"))

    result = await h.registry.execute(h.input("outer"))

    assert ok("done") == result
    nested_records = [record for record in seen if record[0] == "nested"]
    assert 4 == len(nested_records)
    expected = (
        "nested",
        TOOL,
        {"x": (1,)},
        nested_records[0][3],
        parent_token[0],
        agent,
        definition,
    )
    assert all(record == expected for record in nested_records)
    assert all(record[3] is nested_records[0][3] for record in nested_records)
    assert nested_records[0][3] is not parent_token[0]
    assert h.executions[0].token is nested_records[0][3]
    assert h.executions[1].token is parent_token[0]
    assert h.executions[1].parent is None


async def test_tokens_are_fresh_per_call_and_compared_by_identity(h: Harness) -> None:
    add_echo(h)

    await h.execute(call_id="same")
    await h.execute(call_id="same")

    first, second = (execution.token for execution in h.executions)
    assert first is not second
    assert first != second
    assert first == first
    assert isinstance(first, ExecutionToken)
    assert "same" in repr(first)


async def test_the_body_receives_the_frozen_snapshot_and_the_callers_object_is_untouched(
    h: Harness,
) -> None:
    arguments = {"path": "a.txt", "lines": [1, 2, {"deep": ["x"]}]}
    original = copy.deepcopy(arguments)
    received = add_echo(h)

    await h.execute(arguments=arguments)

    (snapshot,) = received
    assert {"path": "a.txt", "lines": (1, 2, {"deep": ("x",)})} == snapshot
    assert snapshot is not arguments
    assert original == arguments
    assert type(arguments["lines"]) is list
    assert h.executions[0].arguments is snapshot
    with pytest.raises(TypeError):
        snapshot["path"] = "b.txt"


class _CountingInput(ToolExecutionInput):
    """Counts reads of each input field (the registry must read each one once)."""

    reads: dict[str, int] = {}  # noqa: RUF012

    def __getattribute__(self, name: str) -> Any:
        counts = type(self).reads
        if name in counts:
            counts[name] += 1
        return super().__getattribute__(name)


async def test_entry_reads_each_input_field_once(h: Harness) -> None:
    add_echo(h)
    fields = [a.name for a in attrs.fields(ToolExecutionInput)]
    call = _CountingInput(call_id="c", name=TOOL, arguments={"a": 1}, signal=h.signal)
    _CountingInput.reads = dict.fromkeys(fields, 0)

    result = await h.registry.execute(call)

    assert ok("done") == result
    assert dict.fromkeys(fields, 1) == _CountingInput.reads


# --------------------------------------------------------------------------------------
# execute() is a checkpoint on every path (CONVENTIONS.md, "Trio's design rules")


async def _deny(execution: ToolExecution, call_next: PreNext) -> PreDecision:
    return Deny("no")


async def _short_circuit(execution: ToolDispatchExecution, call_next: AroundNext) -> ToolResult:
    return ok("cached")


@pytest.mark.parametrize(
    ("setup", "call", "code"),
    [
        (None, {}, None),
        ("pre-aborted", {}, "ABORTED_BEFORE_DISPATCH"),
        (None, {"arguments": {1, 2}}, "NOT_JSON"),
        ("pre-aborted", {"arguments": {1, 2}}, "NOT_JSON"),
        (None, {"name": "nope"}, "UNKNOWN_TOOL"),
        (None, {"arguments": {"n": "x"}}, "INVALID_ARGS"),
        ("deny", {}, "DENIED"),
        ("short-circuit", {}, None),
    ],
)
async def test_execute_is_a_checkpoint_on_every_path(
    h: Harness, setup: str | None, call: dict[str, Any], code: str | None
) -> None:
    async def body(args: ExactArgs, ctx: ToolRunContext) -> str:
        return "no checkpoint in here"

    h.registry.tool(body, name=TOOL)
    if setup == "pre-aborted":
        h.source.cancel()
    elif setup == "deny":
        h.registry.add_pre_execute(_deny)
    elif setup == "short-circuit":
        h.registry.add_around_execute(_short_circuit)

    with trio.testing.assert_checkpoints():
        result = await h.execute(**{"arguments": {"n": 1}, **call})

    assert code == result.code


async def test_additional_context_values_are_validated() -> None:
    with pytest.raises(TypeError):
        AdditionalContext(1)
    with pytest.raises(TypeError):
        Accept(additional_contexts=["text"])
