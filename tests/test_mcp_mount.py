"""``trio_tools.mcp.mount``: remote MCP tools as registry tools, with the real SDK on both
sides (a trio_tools server, and the SDK's own low-level server for a foreign one)."""

from __future__ import annotations

from typing import Any

import attrs
import mcp.types as types
import pytest
import trio
import trio.lowlevel
from helpers_mcp import ERAS, WIRE_ERAS, Era, Published, open_client, open_wire_client
from mcp import ClientSession
from mcp.server import Server
from mcp.shared.memory import create_client_server_memory_streams

import trio_tools
from trio_tools import (
    AdditionalContext,
    Block,
    CancelReason,
    CancelSource,
    ErrorInfo,
    ImageBlock,
    TextBlock,
    ToolCall,
    ToolExecutionInput,
    ToolOutput,
    ToolRegistry,
    ToolResult,
    ToolRunContext,
)
from trio_tools.mcp import MCP_CONNECTION_LOST, mount, server
from trio_tools.mcp._server import CALLER_CANCELLED, REQUEST_CANCELLED


@attrs.frozen
class EchoArgs:
    text: str


@attrs.define
class Remote:
    """A trio_tools registry to serve, and what happened on its side."""

    registry: ToolRegistry = attrs.Factory(ToolRegistry)
    published: Published = attrs.Factory(Published)
    reasons: list[CancelReason] = attrs.Factory(list)
    running: int = 0
    started: trio.Event = attrs.Factory(trio.Event)
    release: trio.Event = attrs.Factory(trio.Event)

    def server(self) -> Server[Any]:
        return server(self.registry, name="remote")

    def results(self) -> dict[str, ToolResult]:
        return dict(self.published)


def text_of(result: ToolResult) -> str:
    return "\n".join(block.text for block in result.content if isinstance(block, TextBlock))


class CustomError(Exception):
    code = "CUSTOM_CODE"


def make_remote(*, parallel_waiters: int = 1) -> Remote:
    remote = Remote()
    registry = remote.registry

    @registry.tool(concurrency_safe=True)
    async def echo(args: EchoArgs, ctx: ToolRunContext) -> str:
        """Echo the text."""
        return args.text

    @registry.tool(concurrency_safe=True)
    async def wait_for_stop(args: object, ctx: ToolRunContext) -> str:
        """Run until cancelled."""
        ctx.signal.add_listener(remote.reasons.append)
        remote.running += 1
        if remote.running == parallel_waiters:
            remote.started.set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    @registry.tool
    async def rich(args: object, ctx: ToolRunContext) -> ToolOutput:
        """Every field of a result set."""
        ctx.defer_context(AdditionalContext("remember", source="rich"))
        ctx.halt_turn("enough")
        return ToolOutput(
            content=(TextBlock("text"), ImageBlock("image/png", "aGk=")),
            meta={"rows": [1, 2.5, None], "big": 10**30},
        )

    @registry.tool
    async def concluding(args: object, ctx: ToolRunContext) -> str:
        ctx.conclude_turn()
        return "done"

    @registry.tool
    async def failing(args: object, ctx: ToolRunContext) -> str:
        raise CustomError("it broke")

    @registry.tool
    async def denied(args: object, ctx: ToolRunContext) -> str:
        raise AssertionError("the guard denies it")

    @registry.tool
    async def blocked(args: object, ctx: ToolRunContext) -> str:
        return "secret"

    @registry.tool
    async def report(args: object, ctx: ToolRunContext) -> str:
        ctx.report_progress(0.5)
        ctx.report_progress({"progress": 3, "total": 4, "message": "nearly"})
        await remote.release.wait()
        return "reported"

    registry.add_guard(lambda e: "not allowed" if e.name == "denied" else None)

    async def block_secret(
        execution: trio_tools.ToolExecution, result: ToolResult, call_next: Any
    ) -> trio_tools.PostDecision:
        if execution.name == "blocked":
            return Block("redacted", additional_contexts=(AdditionalContext("blocked it"),))
        decision: trio_tools.PostDecision = await call_next()
        return decision

    registry.add_post_execute(block_secret)
    registry.add_observer(remote.published)
    return remote


@attrs.define
class Local:
    registry: ToolRegistry = attrs.Factory(ToolRegistry)
    published: Published = attrs.Factory(Published)
    progress: list[object] = attrs.Factory(list)

    def __attrs_post_init__(self) -> None:
        self.registry.add_observer(self.published)

    async def call(
        self, name: str, arguments: object, signal: trio_tools.CancelSignal
    ) -> ToolResult:
        return await self.registry.execute(
            ToolExecutionInput(
                call_id=f"local-{name}",
                name=name,
                arguments=arguments,
                signal=signal,
                on_progress=self.progress.append,
            )
        )


async def test_mount_registers_each_remote_tool_with_its_schema_and_hints() -> None:
    remote = make_remote()
    local = Local()
    async with open_client(remote.server(), "legacy") as (client, _):
        registration = await mount(local.registry, client, prefix="remote_", timeout=30)
        echo = local.registry.get("remote_echo")
        waiting = local.registry.get("remote_rich")
        remote_echo = remote.registry.get("echo")

    assert echo is not None
    assert waiting is not None
    assert remote_echo is not None
    assert [f"remote_{s.name}" for s in remote.registry.schemas()] == [
        s.name for s in local.registry.schemas()
    ]
    assert remote_echo.parameters == echo.parameters
    assert "Echo the text." == echo.description
    assert (True, False) == (echo.concurrency_safe, waiting.concurrency_safe)
    assert 30 == echo.timeout
    assert registration.active


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("echo", {"text": "hi"}),
        ("echo", {"text": 3}),
        ("rich", {}),
        ("concluding", {}),
        ("failing", {}),
        ("denied", {}),
        ("blocked", {}),
    ],
)
async def test_a_trio_tools_result_crosses_the_hop_unchanged(
    era: Era, name: str, arguments: dict[str, object]
) -> None:
    remote = make_remote()
    local = Local()
    async with open_client(remote.server(), era) as (client, _):
        await mount(local.registry, client)
        result = await local.call(name, arguments, CancelSource().signal)

    [(_, published_remotely)] = remote.published
    assert published_remotely == result
    assert [(name, result)] == local.published
    assert result is local.published[0][1]


async def test_the_crossing_keeps_each_code() -> None:
    remote = make_remote()
    local = Local()
    async with open_client(remote.server(), "legacy-wire") as (client, _):
        await mount(local.registry, client)
        codes = [
            (await local.call(name, arguments, CancelSource().signal)).code
            for name, arguments in [
                ("echo", {"text": "hi"}),
                ("echo", {}),
                ("failing", {}),
                ("denied", {}),
                ("blocked", {}),
            ]
        ]

    assert [
        None,
        trio_tools.INVALID_ARGS,
        "CUSTOM_CODE",
        trio_tools.DENIED,
        trio_tools.BLOCKED,
    ] == (codes)


@pytest.mark.parametrize("era", ERAS)
async def test_the_call_signal_cancels_the_remote_request(era: Era) -> None:
    """The remote handler is cancelled when the mounting side's signal fires; over
    JSON-RPC the SDK sends ``notifications/cancelled`` and no response comes back."""
    remote = make_remote()
    local = Local()
    source = CancelSource()
    async with open_client(remote.server(), era) as (client, wire):
        await mount(local.registry, client)
        async with trio.open_nursery() as nursery:
            results: list[ToolResult] = []

            async def call() -> None:
                results.append(await local.call("wait_for_stop", {}, source.signal))

            nursery.start_soon(call)
            await remote.started.wait()
            source.cancel("user pressed stop")
        await remote.published.wait_for(1)
        # The connection still serves calls afterwards.
        assert "ok" == text_of(await local.call("echo", {"text": "ok"}, CancelSource().signal))

    assert [trio_tools.TOOL_ABORTED] == [result.code for result in results]
    expected = CALLER_CANCELLED if era == "modern" else REQUEST_CANCELLED
    assert [CancelReason("CANCELLED", expected)] == remote.reasons
    assert ("wait_for_stop", trio_tools.TOOL_ABORTED) == (
        remote.published[0][0],
        remote.published[0][1].code,
    )
    if wire is not None:
        request_id = wire.request_id_of("tools/call", "wait_for_stop")
        assert [request_id] == [n["params"]["requestId"] for n in wire.cancel_notices()]
        assert [] == wire.responses_to(request_id)


@pytest.mark.parametrize("era", ERAS)
async def test_remote_progress_reaches_report_progress(era: Era) -> None:
    remote = make_remote()
    local = Local()
    async with open_client(remote.server(), era) as (client, _):
        await mount(local.registry, client)
        await call_report(remote, local, "report")


async def call_report(remote: Remote, local: Local, name: str) -> None:
    """Call the remote ``report`` tool as ``name``; check the progress it reports locally."""

    def on_progress(progress: object) -> None:
        local.progress.append(progress)
        if len(local.progress) == 2:
            remote.release.set()

    result = await local.registry.execute(
        ToolExecutionInput(
            call_id="p",
            name=name,
            arguments={},
            signal=CancelSource().signal,
            on_progress=on_progress,
        )
    )
    assert "reported" == text_of(result)
    assert [{"progress": 0.5}, {"progress": 3.0, "total": 4.0, "message": "nearly"}] == (
        local.progress
    )


async def test_progress_crosses_two_hops_unchanged() -> None:
    """remote -> middle (mounts remote, serves itself) -> local: the same mappings arrive."""
    remote = make_remote()
    middle = ToolRegistry()
    local = Local()
    async with open_client(remote.server(), "legacy-wire") as (client, _):
        await mount(middle, client)
        async with open_client(server(middle, name="middle"), "modern-wire") as (outer, _):
            await mount(local.registry, outer, prefix="m_")
            await call_report(remote, local, "m_report")


def foreign_server() -> Server[Any]:
    """The SDK's own low-level server, without trio_tools: plain MCP results."""

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(
            tools=[
                types.Tool(name="structured", input_schema={"type": "object"}),
                types.Tool(
                    name="broken",
                    description="Fails.",
                    input_schema={"type": "object"},
                    annotations=types.ToolAnnotations(read_only_hint=True),
                ),
                types.Tool(name="resource", input_schema={"type": "object"}),
            ]
        )

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        if params.name == "structured":
            return types.CallToolResult(
                content=[types.TextContent(text='{"temperature": 21}')],
                structured_content={"temperature": 21, "unit": "C", "ok": True},
            )
        if params.name == "broken":
            return types.CallToolResult(
                content=[types.TextContent(text="disk full"), types.TextContent(text="retry")],
                is_error=True,
            )
        return types.CallToolResult(
            content=[
                types.EmbeddedResource(
                    resource=types.TextResourceContents(uri="file:///a.txt", text="file text")
                ),
                types.AudioContent(data="AAAA", mime_type="audio/wav"),
            ]
        )

    return Server("foreign", on_list_tools=list_tools, on_call_tool=call_tool)


@pytest.mark.parametrize("era", ["legacy", "modern"])
async def test_a_foreign_server_result_maps_field_by_field(era: Era) -> None:
    local = Local()
    async with open_client(foreign_server(), era) as (client, _):
        await mount(local.registry, client)
        structured = await local.call("structured", {}, CancelSource().signal)
        broken = await local.call("broken", {}, CancelSource().signal)
        resource = await local.call("resource", {}, CancelSource().signal)
        broken_definition = local.registry.get("broken")

    assert (
        ToolResult(
            content=(TextBlock('{"temperature": 21}'),),
            meta={"temperature": 21, "unit": "C", "ok": True},
        )
        == structured
    )
    assert (
        ToolResult(
            content=(TextBlock("disk full"), TextBlock("retry")),
            is_error=True,
            error=ErrorInfo("MCPToolError", trio_tools.TOOL_FAILED, "disk full\nretry"),
        )
        == broken
    )
    assert (
        TextBlock("file text"),
        TextBlock('{"type":"audio","data":"AAAA","mimeType":"audio/wav"}'),
    ) == resource.content
    assert broken_definition is not None
    assert ("Fails.", True) == (broken_definition.description, broken_definition.concurrency_safe)


@pytest.mark.parametrize("era", WIRE_ERAS)
async def test_a_lost_connection_is_mcp_connection_lost(era: Era) -> None:
    remote = make_remote()
    local = Local()
    async with open_wire_client(remote.server(), modern=era == "modern-wire") as (client, wire):
        await mount(local.registry, client)
        async with trio.open_nursery() as nursery:
            results: list[ToolResult] = []

            async def call() -> None:
                results.append(await local.call("wait_for_stop", {}, CancelSource().signal))

            nursery.start_soon(call)
            await remote.started.wait()
            wire.close()
        # After the loss every call is MCP_CONNECTION_LOST too.
        later = await local.call("echo", {"text": "x"}, CancelSource().signal)

    assert [MCP_CONNECTION_LOST, MCP_CONNECTION_LOST] == [r.code for r in [*results, later]]
    assert "MCPConnectionLostError" == later.error.name
    assert text_of(later).startswith("Error: MCP connection lost")


async def test_a_json_rpc_error_reply_is_tool_failed() -> None:
    """A tool that vanished from the server after the mount: -32602 comes back."""
    remote = make_remote()
    local = Local()

    async def vanishing(args: object, ctx: ToolRunContext) -> str:
        return "here"

    registration = remote.registry.register(trio_tools.define_tool(vanishing))
    async with open_client(remote.server(), "legacy") as (client, _):
        await mount(local.registry, client)
        registration()
        result = await local.call("vanishing", {}, CancelSource().signal)

    message = 'MCP error -32602: unknown tool "vanishing"'
    assert (
        ToolResult(
            content=(TextBlock(f"Error: {message}"),),
            is_error=True,
            error=ErrorInfo("MCPRequestError", trio_tools.TOOL_FAILED, message),
        )
        == result
    )


async def test_arguments_that_are_not_an_object_are_invalid_args() -> None:
    remote = make_remote()
    local = Local()
    async with open_client(remote.server(), "legacy") as (client, _):
        await mount(local.registry, client)
        result = await local.call("echo", [1, 2], CancelSource().signal)

    assert trio_tools.INVALID_ARGS == result.code
    assert [] == remote.published


async def test_a_duplicate_name_mounts_nothing_and_the_registration_removes_everything() -> None:
    remote = make_remote()
    local = Local()

    @local.registry.tool
    async def rich(args: object, ctx: ToolRunContext) -> str:
        return "local"

    async with open_client(remote.server(), "legacy") as (client, _):
        with pytest.raises(ValueError, match="rich"):
            await mount(local.registry, client)
        assert ["rich"] == [s.name for s in local.registry.schemas()]
        registration = await mount(local.registry, client, prefix="r_")
        assert 1 + len(remote.registry.schemas()) == len(local.registry.schemas())
        registration()
        registration()

    assert ["rich"] == [s.name for s in local.registry.schemas()]
    assert not registration.active
    assert "local" == text_of(await local.call("rich", {}, CancelSource().signal))


async def test_mount_rejects_a_bad_timeout_before_listing() -> None:
    with pytest.raises(ValueError, match="timeout"):
        await mount(ToolRegistry(), None, timeout=0)


async def test_a_mounted_timeout_is_the_tools_timeout(autojump_clock: trio.abc.Clock) -> None:
    remote = make_remote()
    local = Local()  # the registry enforces tool timeouts by default
    async with open_client(remote.server(), "legacy-wire") as (client, wire):
        await mount(local.registry, client, timeout=2.5)
        result = await local.call("wait_for_stop", {}, CancelSource().signal)
        await remote.published.wait_for(1)

    assert trio_tools.TOOL_TIMEOUT == result.code
    assert "Error: tool call timed out after 2.5s" == text_of(result)
    assert [CancelReason("CANCELLED", REQUEST_CANCELLED)] == remote.reasons
    assert wire is not None
    assert 1 == len(wire.cancel_notices())


@pytest.mark.parametrize("era", ERAS)
async def test_a_batch_over_mounted_tools_stopped_mid_batch_stays_balanced(era: Era) -> None:
    """Two parallel remote calls run, an exclusive one waits for them; the stop cancels
    both remote requests and the rest never start: the journal is balanced."""
    remote = make_remote(parallel_waiters=2)
    local = Local()
    journal = trio_tools.MemoryJournal()
    stop = CancelSource()
    calls = [
        ToolCall("c1", "wait_for_stop", "{}"),
        ToolCall("c2", "wait_for_stop", "{}"),
        ToolCall("c3", "concluding", "{}"),
        ToolCall("c4", "echo", '{"text": "never"}'),
    ]
    async with open_client(remote.server(), era) as (client, wire):
        await mount(local.registry, client)
        async with trio.open_nursery() as nursery:
            outcomes: list[trio_tools.BatchOutcome] = []

            async def batch() -> None:
                outcomes.append(
                    await trio_tools.run_tool_calls(
                        local.registry, calls, signal=stop.signal, journal=journal
                    )
                )

            nursery.start_soon(batch)
            await remote.started.wait()
            stop.cancel("user pressed stop")
        await remote.published.wait_for(2)

    journal.assert_balanced()
    [outcome] = outcomes
    assert outcome.aborted
    assert [
        (trio_tools.TOOL_ABORTED, False),
        (trio_tools.TOOL_ABORTED, False),
        (trio_tools.TOOL_ABORTED_BEFORE_DISPATCH, True),
        (trio_tools.TOOL_ABORTED_BEFORE_DISPATCH, True),
    ] == [(r.code, r.synthetic) for r in outcome.results]
    assert 2 * [trio_tools.TOOL_ABORTED] == [r.code for _, r in remote.published]
    assert 2 == len(remote.reasons)
    if wire is not None:
        assert 2 == len(wire.cancel_notices())


@pytest.mark.parametrize("era", WIRE_ERAS)
@pytest.mark.parametrize(("name", "code"), [("failing", "CUSTOM_CODE"), ("echo", "ABORTED")])
async def test_a_remote_error_beats_a_cancel_that_came_with_the_answer(
    era: Era, name: str, code: str
) -> None:
    """The signal fires once the answer is in but before the mounted body resumes: a
    remote failure beats cancellation (as a local tool's raise does), a success is
    replaced by ``ABORTED``."""
    remote = make_remote()
    local = Local()
    source = CancelSource()
    async with open_wire_client(remote.server(), modern=era == "modern-wire") as (client, wire):
        await mount(local.registry, client)
        wire.after_next_response(lambda: source.cancel("too late"))
        result = await local.call(name, {"text": "hi"}, source.signal)

    [(_, published_remotely)] = remote.published
    assert source.signal.cancelled
    assert code == result.code
    if name == "failing":
        assert published_remotely == result


@pytest.mark.parametrize("era", ERAS)
async def test_a_call_after_the_client_closed_is_mcp_connection_lost(era: Era) -> None:
    remote = make_remote()
    local = Local()
    async with open_client(remote.server(), era) as (client, _):
        await mount(local.registry, client)

    result = await local.call("echo", {"text": "hi"}, CancelSource().signal)

    assert MCP_CONNECTION_LOST == result.code
    assert "MCPConnectionLostError" == result.error.name
    assert [] == remote.published


async def test_a_client_session_mounts_calls_cancels_and_closes() -> None:
    """The lower-level ``mcp.ClientSession`` works like ``mcp.Client``."""
    remote = make_remote()
    local = Local()
    source = CancelSource()
    mcp_server = remote.server()
    async with (
        create_client_server_memory_streams() as ((read, write), (s_read, s_write)),
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(
            mcp_server.run, s_read, s_write, mcp_server.create_initialization_options()
        )
        async with ClientSession(read, write) as session:
            await session.initialize()
            await mount(local.registry, session, prefix="s_")
            echoed = await local.call("s_echo", {"text": "hi"}, CancelSource().signal)
            async with trio.open_nursery() as calls:
                results: list[ToolResult] = []

                async def call() -> None:
                    results.append(await local.call("s_wait_for_stop", {}, source.signal))

                calls.start_soon(call)
                await remote.started.wait()
                source.cancel("user pressed stop")
            await remote.published.wait_for(2)
        closed = await local.call("s_echo", {"text": "hi"}, CancelSource().signal)
        nursery.cancel_scope.cancel()

    assert "hi" == text_of(echoed)
    assert [trio_tools.TOOL_ABORTED] == [result.code for result in results]
    assert [CancelReason("CANCELLED", REQUEST_CANCELLED)] == remote.reasons
    assert MCP_CONNECTION_LOST == closed.code
