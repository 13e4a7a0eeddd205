"""Tool authoring as Python users expect: signature tools, the class-vs-signature rule,
definition-time checks, sync tools in worker threads, ``requires_approval`` and
``ToolResult.text``.  (Timeouts that just work: ``test_timeout_enforcement.py``.)"""

from __future__ import annotations

import dataclasses
import enum
import functools
import threading
import typing
from typing import Annotated, Any, Literal, Optional

import attrs
import msgspec
import pytest
import trio
import trio.testing
from helpers_registry import (
    TOOL,
    Harness,
    PreNext,
    aborted,
    aborted_before_dispatch,
    denied,
    error,
    ok,
)

from trio_tools import (
    AdditionalContext,
    Allow,
    ApprovalRequest,
    Ask,
    CancelSignal,
    CancelSource,
    Halt,
    ImageBlock,
    TextBlock,
    ToolCall,
    ToolDefinition,
    ToolExecution,
    ToolRegistry,
    ToolResult,
    ToolRunContext,
    define_tool,
    run_tool_calls,
)


class Color(enum.StrEnum):
    RED = "red"
    BLUE = "blue"


@attrs.frozen
class Point:
    x: int
    y: int = 0


@dataclasses.dataclass(frozen=True)
class Size:
    width: int


class Span(msgspec.Struct, frozen=True):
    start: int
    end: int


class Owner(typing.TypedDict):
    name: str


# --------------------------------------------------------------------------------------
# Signature tools: schema, descriptions, the call


async def draw(
    label: str,
    color: Color,
    point: Point,
    size: Size,
    span: Span,
    owner: Owner,
    points: list[Point],
    weights: dict[str, float],
    mode: Literal["fill", "outline"] = "fill",
    note: Optional[str] = None,  # noqa: UP045 - the Optional spelling is the case under test
    layer: int | None = None,
    *,
    ctx: ToolRunContext,
) -> str:
    """Draw a shape.

    Args:
        label: The text shown
            inside the shape.
        color: Fill colour.
        mode (str): How to draw it.

    Returns:
        Nothing interesting.
    """
    return "drawn"


def test_a_signature_tool_schema_comes_from_annotations_and_defaults() -> None:
    definition = define_tool(draw)

    assert {
        "type": "object",
        "properties": {
            "label": {"description": "The text shown inside the shape.", "type": "string"},
            "color": {"description": "Fill colour.", "$ref": "#/$defs/Color"},
            "point": {"$ref": "#/$defs/Point"},
            "size": {"$ref": "#/$defs/Size"},
            "span": {"$ref": "#/$defs/Span"},
            "owner": {"$ref": "#/$defs/Owner"},
            "points": {"type": "array", "items": {"$ref": "#/$defs/Point"}},
            "weights": {"type": "object", "additionalProperties": {"type": "number"}},
            "mode": {
                "description": "How to draw it.",
                "enum": ("fill", "outline"),
                "default": "fill",
            },
            "note": {"anyOf": ({"type": "string"}, {"type": "null"}), "default": None},
            "layer": {"anyOf": ({"type": "integer"}, {"type": "null"}), "default": None},
        },
        "required": ("label", "color", "point", "size", "span", "owner", "points", "weights"),
        "$defs": {
            "Color": {"title": "Color", "enum": ("blue", "red")},
            "Point": {
                "title": "Point",
                "type": "object",
                "properties": {
                    "x": {"type": "integer"},
                    "y": {"type": "integer", "default": 0},
                },
                "required": ("x",),
            },
            "Size": {
                "title": "Size",
                "type": "object",
                "properties": {"width": {"type": "integer"}},
                "required": ("width",),
            },
            "Span": {
                "title": "Span",
                "type": "object",
                "properties": {"start": {"type": "integer"}, "end": {"type": "integer"}},
                "required": ("start", "end"),
            },
            "Owner": {
                "title": "Owner",
                "type": "object",
                "properties": {"name": {"type": "string"}},
                "required": ("name",),
            },
        },
    } == definition.parameters


def test_the_args_section_is_removed_from_the_description() -> None:
    definition = define_tool(draw)

    assert ("draw", "Draw a shape.\n\nReturns:\n    Nothing interesting.") == (
        definition.name,
        definition.description,
    )
    assert "Draw a shape." == define_tool(draw, description="Draw a shape.").description


async def described(
    path: Annotated[str, msgspec.Meta(description="From the annotation.")],
    limit: Annotated[int, msgspec.Meta(ge=1)] = 10,
) -> str:
    """Describe.

    Arguments:
        path: From the docstring, which the annotation overrides.
        limit: At least one.
    """
    return path


def test_an_annotated_description_wins_over_the_docstring_and_constraints_stay() -> None:
    definition = define_tool(described)

    assert "Describe." == definition.description
    assert {
        "path": {"description": "From the annotation.", "type": "string"},
        "limit": {"description": "At least one.", "type": "integer", "minimum": 1, "default": 10},
    } == definition.parameters["properties"]


async def test_the_body_is_called_with_parsed_keyword_arguments() -> None:
    h = Harness()
    received: list[dict[str, object]] = []

    @h.registry.tool(name=TOOL)
    async def body(
        point: Point,
        color: Color,
        tags: list[str],
        scores: dict[str, int],
        when: Literal["now", "later"] = "now",
        limit: int = 5,
        *,
        context: ToolRunContext,
    ) -> str:
        received.append(
            {
                "point": point,
                "color": color,
                "tags": tags,
                "scores": scores,
                "when": when,
                "limit": limit,
                "context": type(context),
            }
        )
        return "ok"

    result = await h.execute(
        arguments={
            "point": {"x": 1},
            "color": "blue",
            "tags": ["a"],
            "scores": {"alice": 3},
            "limit": 7,
            "ignored": True,
        }
    )

    assert ok("ok") == result
    assert [
        {
            "point": Point(1),
            "color": Color.BLUE,
            "tags": ["a"],
            "scores": {"alice": 3},
            "when": "now",
            "limit": 7,
            "context": ToolRunContext,
        }
    ] == received


async def test_a_signature_tool_may_take_no_context_and_the_context_may_be_positional() -> None:
    h = Harness()

    @h.registry.tool
    async def add(a: int, b: int) -> int:
        return a + b

    @h.registry.tool
    async def where(path: str, ctx: ToolRunContext) -> str:
        return f"{path} in call {ctx.call_id}"

    assert ok("5") == await h.execute("add", {"a": 2, "b": 3})
    assert ok("p in call call-1") == await h.execute("where", {"path": "p"})


async def test_a_signature_tool_lists_every_invalid_argument() -> None:
    h = Harness()
    h.registry.register(define_tool(draw, name=TOOL))

    result = await h.execute(
        arguments={
            "color": "green",
            "point": {"y": "1"},
            "size": {"width": 1},
            "span": {"start": 0, "end": 1},
            "owner": {"name": "o"},
            "points": [{"x": 1}, {"x": "2"}],
            "weights": {"w": "heavy"},
            "mode": "sketch",
        }
    )

    assert (
        error(
            "ToolArgsError",
            "INVALID_ARGS",
            "invalid arguments: "
            + "; ".join(
                [
                    "$.label: missing required field",
                    "$.color: invalid enum value 'green'",
                    "$.point.x: missing required field",
                    "$.point.y: expected int, got str",
                    "$.points[1].x: expected int, got str",
                    "$.weights.w: expected float, got str",
                    "$.mode: invalid enum value 'sketch'",
                ]
            ),
        )
        == result
    )


async def test_a_mutable_default_is_fresh_for_every_call() -> None:
    h = Harness()
    seen: list[list[str]] = []

    @h.registry.tool(name=TOOL)
    def body(tags: list[str] = ["a"]) -> str:  # noqa: B006 - the case under test
        tags.append("mutated")
        seen.append(tags)
        return "ok"

    await h.execute()
    await h.execute()

    assert [["a", "mutated"], ["a", "mutated"]] == seen


# --------------------------------------------------------------------------------------
# The class-vs-signature rule


@attrs.frozen
class Args:
    path: str


async def class_style(args: Args, ctx: ToolRunContext) -> str:
    return ""


async def class_style_unannotated_context(args: Args, ctx) -> str:  # type: ignore[no-untyped-def]
    return ""


async def raw_unannotated(args, ctx):  # type: ignore[no-untyped-def]
    return ""


async def raw_object(args: object, ctx: ToolRunContext) -> str:
    return ""


async def one_class_parameter(args: Args) -> str:
    return ""


async def str_and_context(path: str, ctx: ToolRunContext) -> str:
    return ""


async def two_classes(a: Args, b: Args) -> str:
    return ""


async def class_then_keyword_context(args: Args, *, ctx: ToolRunContext) -> str:
    return ""


@pytest.mark.parametrize(
    ("body", "args", "properties"),
    [
        (class_style, Args, None),
        (class_style_unannotated_context, Args, None),
        (raw_unannotated, None, None),
        (raw_object, None, None),
        (one_class_parameter, "signature", ("args",)),
        (str_and_context, "signature", ("path",)),
        (two_classes, "signature", ("a", "b")),
        (class_then_keyword_context, "signature", ("args",)),
    ],
    ids=lambda value: getattr(value, "__name__", repr(value)),
)
def test_class_style_applies_exactly_to_two_positional_parameters_class_and_context(
    body: Any, args: object, properties: tuple[str, ...] | None
) -> None:
    definition = define_tool(body)

    if args == "signature":
        assert properties == tuple(definition.parameters["properties"])
        assert "title" not in definition.parameters
    else:
        assert args is definition.args


async def test_a_one_parameter_class_tool_takes_the_class_as_a_named_argument() -> None:
    h = Harness()
    received: list[Args] = []

    async def body(args: Args) -> str:
        received.append(args)
        return "ok"

    h.registry.register(define_tool(body, name=TOOL))

    await h.execute(arguments={"args": {"path": "p"}})

    assert [Args("p")] == received


class Opaque:
    pass


async def unannotated(path: str, count, *, ctx: ToolRunContext) -> str:  # type: ignore[no-untyped-def]
    return ""


async def star_args(*paths: str) -> str:
    return ""


async def star_kwargs(path: str, **rest: str) -> str:
    return ""


async def opaque(thing: Opaque) -> str:
    return ""


async def wrong_context(path: str, ctx: ToolExecution) -> str:
    return ""


async def two_contexts(a: ToolRunContext, b: ToolRunContext) -> str:
    return ""


async def positional_only(path: str, /) -> str:
    return ""


async def bad_default(when: str = object()) -> str:  # type: ignore[assignment]
    return ""


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (unannotated, r"tool 'unannotated', parameter 'count': is not annotated"),
        (star_args, r"tool 'star_args', parameter 'paths': a tool cannot take \*paths"),
        (star_kwargs, r"tool 'star_kwargs', parameter 'rest': a tool cannot take \*\*rest"),
        (opaque, r"tool 'opaque', parameter 'thing': unsupported annotation"),
        (wrong_context, r"tool 'wrong_context', parameter 'ctx': unsupported annotation"),
        (two_contexts, r"tool 'two_contexts', parameter 'b': only one parameter"),
        (positional_only, r"tool 'positional_only', parameter 'path': is positional-only"),
        (bad_default, r"tool 'bad_default', parameter 'when': default .* is not JSON"),
    ],
    ids=lambda value: getattr(value, "__name__", "message"),
)
def test_a_signature_the_registry_cannot_call_is_a_type_error_at_definition(
    body: Any, message: str
) -> None:
    registry = ToolRegistry()

    with pytest.raises(TypeError, match=message):
        registry.tool(body)
    assert registry.get(body.__name__) is None


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(lambda: None, id="no-parameters"),
        pytest.param(lambda args: None, id="one-parameter"),
        pytest.param(lambda args, ctx, extra: None, id="three-parameters"),
    ],
)
def test_a_body_that_cannot_take_args_and_ctx_is_a_type_error_when_args_is_given(
    body: Any,
) -> None:
    with pytest.raises(TypeError, match=r"tool 't': a body with an argument type must take"):
        define_tool(body, name="t", args=Args)
    with pytest.raises(TypeError, match=r"must take \(args, ctx\)"):
        ToolDefinition(name="t", execute=body, args=Args)


def test_a_class_style_body_with_a_required_keyword_only_parameter_is_rejected() -> None:
    async def body(args: Args, ctx: ToolRunContext, *, extra: int) -> str:
        return ""

    with pytest.raises(TypeError, match=r"tool 'body': .*must take \(args, ctx\)"):
        define_tool(body)


def test_an_async_generator_cannot_be_a_tool_body() -> None:
    async def body(args: object, ctx: ToolRunContext) -> Any:
        yield "never"

    with pytest.raises(TypeError, match="async generator"):
        define_tool(body)


class AsyncCallable:
    """An object whose ``__call__`` is a coroutine function."""

    __name__ = "async_callable"

    async def __call__(self, path: str) -> str:
        return f"async {trio.lowlevel.in_trio_run()}"


class SyncCallable:
    """An object whose ``__call__`` is a plain function: it runs in a thread."""

    __name__ = "sync_callable"

    def __call__(self, path: str) -> str:
        return f"sync {trio.lowlevel.in_trio_run()}"


async def _prefixed(prefix: str, path: str) -> str:
    return f"{prefix}{path} {trio.lowlevel.in_trio_run()}"


def _sync_prefixed(prefix: str, path: str) -> str:
    return f"{prefix}{path} {trio.lowlevel.in_trio_run()}"


async def test_async_or_sync_is_decided_through_partials_and_callable_objects() -> None:
    h = Harness()
    h.registry.tool(AsyncCallable())
    h.registry.tool(SyncCallable())
    h.registry.tool(functools.partial(_prefixed, prefix="a:"), name="partial")
    h.registry.tool(functools.partial(_sync_prefixed, prefix="s:"), name="sync_partial")

    assert [ok("async True"), ok("sync False"), ok("a:p True"), ok("s:p False")] == [
        await h.execute(name, {"path": "p"})
        for name in ("async_callable", "sync_callable", "partial", "sync_partial")
    ]
    assert ["path"] == list(h.registry.get("partial").parameters["properties"])  # type: ignore[union-attr]


def test_a_partial_takes_its_description_from_the_wrapped_function() -> None:
    async def body(prefix: str, path: str) -> str:
        """Read with a prefix."""
        return ""

    assert "Read with a prefix." == define_tool(functools.partial(body, "x"), name="b").description


# --------------------------------------------------------------------------------------
# Sync tools in worker threads


async def test_a_sync_tool_runs_in_a_worker_thread() -> None:
    h = Harness()
    threads: list[threading.Thread] = []

    @h.registry.tool(name=TOOL)
    def body(n: int) -> int:
        threads.append(threading.current_thread())
        return n * 2

    assert ok("6") == await h.execute(arguments={"n": 3})
    assert [False] == [thread is threading.main_thread() for thread in threads]


class ThreadGate:
    """Hands control between the Trio test and a sync tool's thread, without sleeping."""

    def __init__(self) -> None:
        self.entered = trio.Event()
        self.go = threading.Event()
        self.returned = False

    def enter(self) -> None:
        """In the tool's thread: say so, then wait until the test lets it go on."""
        trio.from_thread.run_sync(self.entered.set)
        assert self.go.wait(timeout=30), "the test never released the thread"


async def test_a_sync_tool_checking_cancelled_is_aborted_when_the_caller_cancels() -> None:
    h = Harness()
    gate = ThreadGate()

    @h.registry.tool(name=TOOL)
    def body(*, ctx: ToolRunContext) -> str:
        gate.enter()
        ctx.check_cancelled()
        gate.returned = True
        return "finished"

    async with trio.open_nursery() as nursery:
        pending = h.start_execute(nursery)
        await gate.entered.wait()
        h.source.cancel("stop")
        gate.go.set()

    assert aborted() == pending.result
    assert not gate.returned


async def test_a_sync_tool_checking_cancelled_times_out_past_its_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    h = Harness()
    gate = ThreadGate()

    @h.registry.tool(name=TOOL, timeout=5)
    def body(*, ctx: ToolRunContext) -> str:
        gate.enter()
        ctx.check_cancelled()
        return "finished"

    async with trio.open_nursery() as nursery:
        pending = h.start_execute(nursery)
        await gate.entered.wait()
        await trio.sleep(6)  # virtual time: the deadline passes while the thread waits
        assert not pending.done
        gate.go.set()

    assert error("ToolTimeoutError", "TOOL_TIMEOUT", "tool call timed out after 5s") == (
        pending.result
    )


async def test_a_sync_tool_that_never_checks_keeps_the_call_pending_until_it_returns() -> None:
    h = Harness()
    gate = ThreadGate()

    @h.registry.tool(name=TOOL)
    def body() -> str:
        gate.enter()
        gate.returned = True
        return "finished anyway"

    async with trio.open_nursery() as nursery:
        pending = h.start_execute(nursery)
        await gate.entered.wait()
        h.source.cancel("stop")
        await trio.testing.wait_all_tasks_blocked()
        assert (False, False, []) == (pending.done, gate.returned, h.published)
        gate.go.set()

    # It returned after the signal fired: the body ran, so side effects were possible.
    assert aborted() == pending.result
    assert gate.returned


@pytest.mark.parametrize("cancel", ["signal", "ambient"])
async def test_a_sync_tool_cancelled_while_waiting_for_a_thread_is_aborted_before_dispatch(
    cancel: str,
) -> None:
    """Waiting for the thread limiter is not running the body: cancelled there (by its
    signal or by an enclosing scope), the body never ran, so no side effect was possible."""
    limiter = trio.CapacityLimiter(1)
    h = Harness(ToolRegistry(thread_limiter=limiter))
    gate = ThreadGate()
    entered: list[str] = []

    @h.registry.tool(name=TOOL)
    def body(*, ctx: ToolRunContext) -> str:
        entered.append(ctx.call_id)
        if ctx.call_id == "holder":
            gate.enter()
        return "ran"

    waiting = CancelSource()
    scope = trio.CancelScope()
    outcomes: dict[str, object] = {}

    async def call(call_id: str, signal: CancelSignal, scope: trio.CancelScope) -> None:
        with scope:
            try:
                call_input = h.input(call_id=call_id, signal=signal)
                outcomes[call_id] = await h.registry.execute(call_input)
            except trio.Cancelled:
                outcomes[call_id] = "raised Cancelled"
                raise

    async with trio.open_nursery() as nursery:
        nursery.start_soon(call, "holder", h.signal, trio.CancelScope())
        await gate.entered.wait()  # the holder's thread has the limiter's only token
        try:
            nursery.start_soon(call, "waiting", waiting.signal, scope)
            await trio.testing.wait_all_tasks_blocked()
            assert 1 == limiter.statistics().tasks_waiting
            if cancel == "signal":
                waiting.cancel("stop")
            else:
                scope.cancel()
            await trio.testing.wait_all_tasks_blocked()
            assert [aborted_before_dispatch()] == h.published
        finally:
            gate.go.set()  # never leave the holder's thread waiting

    assert ["holder"] == entered
    assert [aborted_before_dispatch(), ok("ran")] == h.published
    expected = aborted_before_dispatch() if cancel == "signal" else "raised Cancelled"
    assert {"holder": ok("ran"), "waiting": expected} == outcomes


async def test_the_thread_limiter_bounds_concurrent_sync_tools_in_a_batch() -> None:
    limiter = trio.CapacityLimiter(2)
    registry = ToolRegistry(thread_limiter=limiter)
    release = threading.Event()
    lock = threading.Lock()
    running = [0]
    most = [0]
    started = trio.Semaphore(0)

    @registry.tool(concurrency_safe=True)
    def work(n: int) -> int:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        trio.from_thread.run_sync(started.release)
        assert release.wait(timeout=30)
        with lock:
            running[0] -= 1
        return n

    calls = [ToolCall(call_id=f"c{i}", name="work", arguments={"n": i}) for i in range(5)]
    source = CancelSource()
    outcomes: list[Any] = []

    async def batch() -> None:
        outcomes.append(await run_tool_calls(registry, calls, signal=source.signal))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(batch)
        await started.acquire()
        await started.acquire()
        await trio.testing.wait_all_tasks_blocked()
        assert (2, 3) == (limiter.borrowed_tokens, limiter.statistics().tasks_waiting)
        release.set()

    assert 2 == most[0]
    assert [str(i) for i in range(5)] == [result.text for result in outcomes[0].results]


async def test_every_ctx_method_works_from_a_sync_tools_thread() -> None:
    h = Harness()
    progress: list[tuple[object, bool]] = []
    children: list[str] = []

    async def child(label: str) -> None:
        await trio.lowlevel.checkpoint()
        children.append(label)

    @h.registry.tool(name=TOOL)
    def body(*, ctx: ToolRunContext) -> str:
        ctx.report_progress("half")
        ctx.defer_context(AdditionalContext("from the thread", source="t"))
        ctx.start_soon(child, "started from the thread")
        ctx.halt_turn("enough")
        ctx.conclude_turn()
        ctx.check_cancelled()
        return f"{ctx.name} {ctx.signal.cancelled}"

    result = await h.execute(
        on_progress=lambda p: progress.append((p, trio.lowlevel.in_trio_run()))
    )

    assert (
        ToolResult(
            content=(TextBlock(f"{TOOL} False"),),
            additional_contexts=(AdditionalContext("from the thread", source="t"),),
            halt=Halt("enough"),
            concludes_turn=True,
        )
        == result
    )
    assert ([("half", True)], ["started from the thread"]) == (progress, children)


async def test_report_progress_from_an_async_bodys_worker_thread_runs_in_the_trio_thread() -> None:
    """Issue 11, item 15: the receiver never runs in a worker thread."""
    h = Harness()
    progress: list[tuple[object, bool]] = []

    @h.registry.tool(name=TOOL)
    async def body(ctx: ToolRunContext) -> str:
        await trio.to_thread.run_sync(ctx.report_progress, 1)
        return "ok"

    await h.execute(on_progress=lambda p: progress.append((p, trio.lowlevel.in_trio_run())))

    assert [(1, True)] == progress


async def test_check_cancelled_from_the_trio_thread_raises_runtime_error() -> None:
    h = Harness()

    @h.registry.tool(name=TOOL)
    async def body(ctx: ToolRunContext) -> str:
        ctx.check_cancelled()
        return "unreachable"

    result = await h.execute()

    assert "RuntimeError" == result.error.name  # type: ignore[union-attr]
    assert result.text.startswith("Error: ctx.check_cancelled() is for sync tools")


async def test_a_sync_body_returning_an_awaitable_fails_and_says_to_use_async_def() -> None:
    h = Harness()
    ran: list[str] = []

    async def later() -> str:
        ran.append("awaited")
        return "never"

    @h.registry.tool(name=TOOL)
    def body() -> typing.Coroutine[Any, Any, str]:
        ran.append("body")
        return later()

    result = await h.execute()

    assert (
        error(
            "TypeError",
            "TOOL_FAILED",
            f"tool '{TOOL}' is a plain function that returned an awaitable (coroutine); "
            "define it with `async def` to run it in Trio",
        )
        == result
    )
    assert ["body"] == ran


# --------------------------------------------------------------------------------------
# requires_approval


async def test_requires_approval_asks_the_approver() -> None:
    h = Harness()
    requests: list[ApprovalRequest] = []

    async def approver(request: ApprovalRequest) -> Literal["granted"]:
        requests.append(request)
        return "granted"

    @h.registry.tool(name=TOOL, requires_approval=True)
    async def body(path: str) -> str:
        return f"deleted {path}"

    no_approver = await h.execute(arguments={"path": "p"})
    h.registry.set_approver(approver)
    granted = await h.execute(arguments={"path": "p"})

    assert denied(f'tool "{TOOL}" requires approval, but no approver is configured') == (
        no_approver
    )
    assert ok("deleted p") == granted
    assert [None] == [request.reason for request in requests]


def _raises(args: Any) -> bool:
    raise KeyError("broken predicate")


@pytest.mark.parametrize(
    ("predicate", "arguments", "asked"),
    [
        (lambda args: args.path.startswith("/"), {"path": "/etc"}, True),
        (lambda args: args.path.startswith("/"), {"path": "notes"}, False),
        (_raises, {"path": "notes"}, True),
        (lambda args: 1, {"path": "notes"}, True),
        (lambda args: None, {"path": "notes"}, True),
    ],
    ids=["holds", "does-not-hold", "raises", "non-bool-truthy", "non-bool-falsy"],
)
async def test_requires_approval_predicate_gets_the_parsed_arguments(
    predicate: Any, arguments: object, asked: bool, caplog: pytest.LogCaptureFixture
) -> None:
    h = Harness()
    h.registry.set_approver(_rejecting)

    @h.registry.tool(name=TOOL, requires_approval=predicate)
    async def body(path: str) -> str:
        return "ran"

    result = await h.execute(arguments=arguments)

    assert (denied(f'the user rejected tool "{TOOL}"') if asked else ok("ran")) == result


async def _rejecting(request: ApprovalRequest) -> Literal["rejected"]:
    return "rejected"


async def test_requires_approval_on_a_class_style_tool_gets_the_class_instance() -> None:
    h = Harness()
    h.registry.set_approver(_rejecting)
    seen: list[object] = []

    def predicate(args: Args) -> bool:
        seen.append(args)
        return True

    async def body(args: Args, ctx: ToolRunContext) -> str:
        return "ran"

    h.registry.register(
        ToolDefinition(name=TOOL, execute=body, args=Args, requires_approval=predicate)
    )

    assert denied(f'the user rejected tool "{TOOL}"') == await h.execute(arguments={"path": "p"})
    assert [Args("p")] == seen


async def test_pre_execute_hooks_see_the_ask_and_may_turn_it_into_anything() -> None:
    h = Harness()
    decisions: list[object] = []

    async def allow_anyway(execution: ToolExecution, call_next: PreNext) -> Any:
        decisions.append(await call_next())
        return Allow()

    h.registry.add_pre_execute(allow_anyway)

    @h.registry.tool(name=TOOL, requires_approval=True)
    async def body() -> str:
        return "ran"

    assert ok("ran") == await h.execute()
    assert [Ask()] == decisions


@pytest.mark.parametrize("flag", [None, 1, "yes"])
def test_requires_approval_must_be_a_bool_or_a_callable(flag: Any) -> None:
    with pytest.raises(TypeError, match="requires_approval"):
        define_tool(raw_object, requires_approval=flag)
    with pytest.raises(TypeError, match="requires_approval"):
        ToolRegistry().tool(raw_object, requires_approval=flag)


async def test_without_requires_approval_no_approver_is_asked() -> None:
    h = Harness()
    asked: list[object] = []

    async def approver(request: ApprovalRequest) -> Literal["granted"]:
        asked.append(request)
        return "granted"

    h.registry.set_approver(approver)
    h.registry.tool(raw_object, name=TOOL)

    assert ok("") == await h.execute()
    assert [] == asked


# --------------------------------------------------------------------------------------
# ToolResult.text


def test_result_text_joins_the_text_blocks() -> None:
    result = ToolResult(
        content=(TextBlock("one"), ImageBlock("image/png", "AAAA"), TextBlock("two"))
    )

    assert "one\ntwo" == result.text
    assert "" == ToolResult(content=()).text
    assert "Error: x" == error("E", "C", "x").text


# --------------------------------------------------------------------------------------
# Signature tools as definitions


async def test_an_evolved_signature_tool_is_still_called_with_keywords() -> None:
    h = Harness()

    async def body(path: str, limit: int = 1) -> str:
        return f"{path}:{limit}"

    definition = attrs.evolve(define_tool(body, name=TOOL), timeout=5.0, description="d")
    h.registry.register(definition)

    assert ok("p:1") == await h.execute(arguments={"path": "p"})
    assert (5.0, "d") == (definition.timeout, definition.description)


async def test_a_directly_constructed_definition_with_a_plain_function_runs_in_a_thread() -> None:
    h = Harness()

    def body(args: object, ctx: ToolRunContext) -> str:
        return f"{args} in trio: {trio.lowlevel.in_trio_run()}"

    h.registry.register(ToolDefinition(name=TOOL, execute=body))

    assert ok("{'a': 1} in trio: False") == await h.execute(arguments={"a": 1})


def test_concurrency_safe_of_a_signature_tool_gets_the_parsed_arguments() -> None:
    registry = ToolRegistry()

    @registry.tool(concurrency_safe=lambda args: args.path.startswith("/tmp/"))
    async def read(path: str) -> str:
        return path

    modes = [
        registry.execution_mode(Harness().input("read", {"path": path}))
        for path in ("/tmp/x", "/etc/passwd")
    ]
    assert ["parallel", "exclusive"] == modes


async def test_check_cancelled_also_works_in_an_async_bodys_own_worker_thread() -> None:
    h = Harness()
    gate = ThreadGate()

    def work(ctx: ToolRunContext) -> str:
        gate.enter()
        ctx.check_cancelled()
        return "finished"

    @h.registry.tool(name=TOOL)
    async def body(*, ctx: ToolRunContext) -> str:
        return await trio.to_thread.run_sync(work, ctx)

    async with trio.open_nursery() as nursery:
        pending = h.start_execute(nursery)
        await gate.entered.wait()
        h.source.cancel("stop")
        gate.go.set()

    assert aborted() == pending.result


async def test_a_raising_sync_tool_is_a_tool_failure() -> None:
    h = Harness()

    @h.registry.tool(name=TOOL)
    def body(path: str) -> str:
        raise FileNotFoundError(f"no such file: {path}")

    assert error("FileNotFoundError", "TOOL_FAILED", "no such file: p") == await h.execute(
        arguments={"path": "p"}
    )
