"""``trio_tools.mcp.server``: a registry served to the real MCP SDK client, in each era."""

from __future__ import annotations

from typing import Any

import attrs
import mcp.types as types
import pytest
import trio
import trio.lowlevel
import trio.testing
from helpers_mcp import ERAS, MEMORY_ERAS, WIRE_ERAS, Era, Published, open_client, open_wire_client
from mcp.shared.exceptions import MCPError

import trio_tools
from trio_tools import AdditionalContext, CancelReason, ToolOutput, ToolResult, ToolRunContext
from trio_tools._json import thaw
from trio_tools.mcp import RESULT_META_KEY, server
from trio_tools.mcp._server import CALLER_CANCELLED, CONNECTION_CLOSED, REQUEST_CANCELLED


@attrs.frozen
class AddArgs:
    a: int
    b: int = 0


@attrs.define
class Served:
    """A registry with a few tools, and what its calls did, for the tests to read."""

    registry: trio_tools.ToolRegistry
    published: Published = attrs.Factory(Published)
    reasons: list[CancelReason] = attrs.Factory(list)
    started: trio.Event = attrs.Factory(trio.Event)
    finished: trio.Event = attrs.Factory(trio.Event)
    release: trio.Event = attrs.Factory(trio.Event)


def make_served() -> Served:
    registry = trio_tools.ToolRegistry()
    served = Served(registry)

    @registry.tool(concurrency_safe=True)
    async def add(args: AddArgs, ctx: ToolRunContext) -> str:
        """Add two numbers."""
        return str(args.a + args.b)

    @registry.tool
    async def wait_for_stop(args: object, ctx: ToolRunContext) -> str:
        """Run until cancelled."""
        ctx.signal.add_listener(served.reasons.append)
        served.started.set()
        try:
            await trio.sleep_forever()
        finally:
            served.finished.set()

    @registry.tool
    async def report(args: object, ctx: ToolRunContext) -> str:
        """Report progress in each shape, then wait to be released."""
        for progress in (0.25, {"progress": 2, "total": 4, "message": "half"}, "step", [1, 2]):
            ctx.report_progress(progress)
        await served.release.wait()
        return "reported"

    @registry.tool
    async def rich(args: object, ctx: ToolRunContext) -> ToolOutput:
        """A result with every field set."""
        ctx.defer_context(AdditionalContext("remember this", source="rich"))
        ctx.halt_turn("enough")
        return ToolOutput(
            content=(trio_tools.TextBlock("text"), trio_tools.ImageBlock("image/png", "aGk=")),
            meta={"rows": [1, 2], "big": 10**30},
        )

    registry.add_observer(served.published)
    return served


async def test_tools_list_gives_each_schema_and_read_only_hint_for_concurrency_safe() -> None:
    served = make_served()
    async with open_client(server(served.registry, name="demo"), "legacy") as (client, _):
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}

    assert ["add", "wait_for_stop", "report", "rich"] == list(listed)
    add = listed["add"]
    assert "Add two numbers." == add.description
    definition = served.registry.get("add")
    assert definition is not None
    assert thaw(definition.parameters) == add.input_schema
    assert types.ToolAnnotations(read_only_hint=True) == add.annotations
    assert listed["wait_for_stop"].annotations is None
    assert {"type": "object"} == listed["wait_for_stop"].input_schema


@pytest.mark.parametrize("era", ERAS)
async def test_call_maps_the_published_result_and_carries_its_wire_form(era: Era) -> None:
    served = make_served()
    async with open_client(server(served.registry, name="demo"), era) as (client, _):
        added = await client.call_tool("add", {"a": 2, "b": 3})
        rich = await client.call_tool("rich", {})
        invalid = await client.call_tool("add", {"a": "two"})

    (_, add_result), (_, rich_result), (_, invalid_result) = served.published
    assert [types.TextContent(text="5")] == added.content
    assert not added.is_error
    assert add_result == ToolResult.from_dict(added.meta[RESULT_META_KEY])
    assert [
        types.TextContent(text="text"),
        types.ImageContent(data="aGk=", mime_type="image/png"),
    ] == rich.content
    assert {"rows": [1, 2], "big": 10**30} == rich.structured_content
    assert rich_result == ToolResult.from_dict(rich.meta[RESULT_META_KEY])
    assert invalid.is_error
    assert [types.TextContent(text="Error: invalid arguments: $.a: expected int, got str")] == (
        invalid.content
    )
    assert trio_tools.INVALID_ARGS == invalid_result.code


@pytest.mark.parametrize("era", ERAS)
async def test_unknown_tool_is_json_rpc_invalid_params(era: Era) -> None:
    served = make_served()
    async with open_client(server(served.registry, name="demo"), era) as (client, _):
        with pytest.raises(MCPError) as caught:
            await client.call_tool("missing", {})

    assert types.INVALID_PARAMS == caught.value.code == -32602
    assert 'unknown tool "missing"' == caught.value.message
    assert [] == served.published


async def _cancel_mid_body(client: Any, served: Served) -> None:
    published = len(served.published)
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:

            async def call() -> None:
                await client.call_tool("wait_for_stop", {})
                raise AssertionError("the cancelled call returned")

            nursery.start_soon(call)
            await served.started.wait()
            scope.cancel()
    assert scope.cancelled_caught
    with trio.fail_after(5):
        await served.finished.wait()
    await served.published.wait_for(published + 1)


@pytest.mark.parametrize("era", WIRE_ERAS)
async def test_client_cancel_mid_body_fires_the_signal_and_sends_no_response(era: Era) -> None:
    """Cancelling the scope around ``call_tool``: the SDK client sends the notice, the
    served body hears its signal with a reason saying so, the call is published ABORTED,
    and the request gets no response."""
    served = make_served()
    async with open_wire_client(
        server(served.registry, name="demo"), modern=era == "modern-wire"
    ) as (
        client,
        wire,
    ):
        await _cancel_mid_body(client, served)
        request_id = wire.request_id_of("tools/call", "wait_for_stop")
        # Still usable afterwards: a later call is answered.
        assert [types.TextContent(text="1")] == (await client.call_tool("add", {"a": 1})).content

    assert [CancelReason("CANCELLED", REQUEST_CANCELLED)] == served.reasons
    assert "wait_for_stop" == served.published[0][0]
    assert trio_tools.TOOL_ABORTED == served.published[0][1].code
    assert [request_id] == [notice["params"]["requestId"] for notice in wire.cancel_notices()]
    assert [] == wire.responses_to(request_id)


async def test_in_process_client_cancel_mid_body_fires_the_signal() -> None:
    """The 2026 in-process client has no notice: the caller's own cancelled scope reaches
    the served call as its signal, and the call raises Cancelled (no response)."""
    served = make_served()
    async with open_client(server(served.registry, name="demo"), "modern") as (client, _):
        await _cancel_mid_body(client, served)

    assert [CancelReason("CANCELLED", CALLER_CANCELLED)] == served.reasons
    assert trio_tools.TOOL_ABORTED == served.published[0][1].code


async def test_legacy_in_memory_client_cancel_mid_body_fires_the_signal() -> None:
    served = make_served()
    async with open_client(server(served.registry, name="demo"), "legacy") as (client, _):
        await _cancel_mid_body(client, served)

    assert [CancelReason("CANCELLED", REQUEST_CANCELLED)] == served.reasons
    assert trio_tools.TOOL_ABORTED == served.published[0][1].code


@pytest.mark.parametrize("era", WIRE_ERAS)
async def test_connection_closed_mid_call_fires_the_signal_saying_so(era: Era) -> None:
    served = make_served()
    mcp_server = server(served.registry, name="demo")
    async with open_wire_client(mcp_server, modern=era == "modern-wire") as (client, wire):
        async with trio.open_nursery() as nursery:

            async def call() -> None:
                with pytest.raises(MCPError) as caught:
                    await client.call_tool("wait_for_stop", {})
                assert types.CONNECTION_CLOSED == caught.value.code

            nursery.start_soon(call)
            await served.started.wait()
            wire.close()
        with trio.fail_after(5):
            await served.finished.wait()

    assert [CancelReason("CANCELLED", CONNECTION_CLOSED)] == served.reasons
    assert [("wait_for_stop", trio_tools.TOOL_ABORTED)] == [
        (name, result.code) for name, result in served.published
    ]
    assert [] == wire.cancel_notices()


@pytest.mark.parametrize("era", ERAS)
async def test_progress_goes_out_as_progress_notifications(era: Era) -> None:
    served = make_served()
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))
        if len(seen) == 4:
            served.release.set()

    async with open_client(server(served.registry, name="demo"), era) as (client, wire):
        reply = await client.call_tool("report", {}, progress_callback=on_progress)

    assert [types.TextContent(text="reported")] == reply.content
    assert [(0.25, None, None), (2.0, 4.0, "half"), (3.0, None, "step"), (4.0, None, "[1,2]")] == (
        seen
    )
    if wire is not None:
        notices = [m for m in wire.received if m.get("method") == "notifications/progress"]
        assert 4 == len(notices)
        # Every notice went out before the response.
        response_at = next(
            i
            for i, m in enumerate(wire.received)
            if m.get("id") == wire.request_id_of("tools/call")
        )
        assert all(wire.received.index(notice) < response_at for notice in notices)


async def test_progress_without_a_token_is_not_sent() -> None:
    served = make_served()
    served.release.set()
    async with open_wire_client(server(served.registry, name="demo"), modern=False) as (
        client,
        wire,
    ):
        await client.call_tool("report", {})

    assert [] == [m for m in wire.received if m.get("method") == "notifications/progress"]


def _task_count() -> int:
    count, stack = 0, [trio.lowlevel.current_root_task()]
    while stack:
        task = stack.pop()
        count += 1
        stack.extend(child for nursery in task.child_nurseries for child in nursery.child_tasks)
    return count


async def test_cancelled_and_finished_calls_leave_no_task_behind() -> None:
    served = make_served()
    async with open_client(server(served.registry, name="demo"), "legacy-wire") as (client, _):
        await client.call_tool("add", {"a": 1})
        await trio.testing.wait_all_tasks_blocked()
        tasks_before = _task_count()
        for _ in range(3):
            served.started = trio.Event()
            served.finished = trio.Event()
            await _cancel_mid_body(client, served)
            await client.call_tool("add", {"a": 1})
        await trio.testing.wait_all_tasks_blocked()
        assert tasks_before == _task_count()

    assert [None] + 3 * [trio_tools.TOOL_ABORTED, None] == [
        result.code for _, result in served.published
    ]


@pytest.mark.parametrize("era", MEMORY_ERAS)
async def test_server_version_is_reported(era: Era) -> None:
    served = make_served()
    async with open_client(server(served.registry, name="demo", version="1.2.3"), era) as (
        client,
        _,
    ):
        info = client.server_info
    if era == "legacy":
        assert info is not None
        assert ("demo", "1.2.3") == (info.name, info.version)


async def test_a_request_cancelled_before_its_handler_ran_never_starts_the_body() -> None:
    """The in-process client calls from a scope that is already cancelled: the handler
    first runs with its request over (as when a cancel notice or the connection's end is
    read right behind the request).  The call is pre-aborted: the body never starts."""
    served = make_served()
    reasons: list[CancelReason | None] = []
    served.registry.add_observer(lambda execution, result: reasons.append(execution.signal.reason))
    async with open_client(server(served.registry, name="demo"), "modern") as (client, _):
        with trio.CancelScope() as scope:
            scope.cancel()
            await client.call_tool("wait_for_stop", {})

    assert scope.cancelled_caught
    assert not served.started.is_set()
    assert [("wait_for_stop", trio_tools.TOOL_ABORTED_BEFORE_DISPATCH)] == [
        (name, result.code) for name, result in served.published
    ]
    assert [CancelReason("CANCELLED", CALLER_CANCELLED)] == reasons
