"""Serve a :class:`~trio_tools.ToolRegistry` to MCP clients with the SDK's low-level Server.

Each ``tools/call`` request is one :meth:`ToolRegistry.execute` call with its own
:class:`~trio_tools.CancelSource`.  The SDK ends a request by cancelling the handler's
scope (the client's ``notifications/cancelled``, the connection closing, or, in process,
the caller's own scope); the handler turns that into the source firing, with a reason
saying which, so the tool body hears it through its signal and the registry publishes
``ABORTED`` — then the SDK's cancellation goes on, and no response is written.
"""

# the package's modules share underscore helpers with each other:
# pyright: reportPrivateUsage=false

from __future__ import annotations

import math
from typing import Any, Final

import mcp.types as types
import trio
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

from .._input import ToolExecutionInput
from .._registry import ToolRegistry
from .._results import ToolResult
from .._signal import CancelSignal, CancelSource
from .._util import logger
from ._convert import call_tool_result, mcp_tool, progress_to_mcp

__all__ = ["serve_stdio", "server"]

REQUEST_CANCELLED: Final = "the MCP client cancelled the request (notifications/cancelled)"
"""The reason a served call's signal gives when the client sent a cancel notice."""
CALLER_CANCELLED: Final = "the in-process MCP client stopped waiting for the request"
"""The reason when an in-process client's own scope was cancelled (no notice exists)."""
CONNECTION_CLOSED: Final = "the MCP connection closed before the tool call finished"
"""The reason when the request ended without a notice: the connection closed (or the
server is shutting down)."""


def server(registry: ToolRegistry, *, name: str, version: str | None = None) -> Server[Any]:
    """An MCP server (the SDK's low-level ``mcp.server.Server``) for ``registry``'s tools.

    ``tools/list`` lists every registered tool with its JSON Schema; a tool whose
    ``concurrency_safe`` is exactly ``True`` carries ``readOnlyHint``.  ``tools/call`` runs
    :meth:`ToolRegistry.execute` with a fresh :class:`~trio_tools.CancelSource` per
    request, so every policy of the registry applies.  The source fires when the client
    sends ``notifications/cancelled`` for the request, and when the connection closes
    while the call runs; the signal's reason says which.  The call is then awaited to
    quiescence like any call: the published result is ``ABORTED`` (or
    ``ABORTED_BEFORE_DISPATCH``) and the request gets no response, as the protocol asks.

    Progress the body reports goes to the client as ``notifications/progress`` when the
    request asked for it (a number is the progress; a mapping may give ``progress``,
    ``total`` and ``message``; anything else is counted, with itself as the message).
    The result becomes a ``CallToolResult``: text and image content, ``isError`` from
    ``result.is_error``, a JSON-object ``meta`` as ``structuredContent``, and the whole
    result's wire form (``ToolResult.to_dict()``) in ``_meta["trio_tools/result"]``.
    A tool that is not registered is the JSON-RPC error -32602 (invalid params).

    Serve it with the SDK's transports: :func:`serve_stdio`, ``mcp.Client(server)`` in
    memory, or its ``streamable_http_app()`` under an ASGI server running on Trio.
    """
    served = _ServedTools(registry)
    mcp_server: Server[Any] = Server(
        name, version=version if version is not None else "", on_list_tools=served.list_tools
    )
    # Registered by method rather than as ``on_call_tool``: the handler answers with the
    # result's wire form as a dict (see ``call_tool_result``), which the SDK validates.
    mcp_server.add_request_handler("tools/call", types.CallToolRequestParams, served.call_tool)
    return mcp_server


async def serve_stdio(registry: ToolRegistry, *, name: str, version: str | None = None) -> None:
    """Serve ``registry`` as an MCP server over this process's stdin and stdout.

    Returns when the client closes stdin (after every running call has been cancelled and
    awaited).  While it serves, stdout belongs to the protocol: the SDK points file
    descriptor 1 at stderr, so stray prints cannot corrupt the wire.
    """
    mcp_server = server(registry, name=name, version=version)
    async with stdio_server() as (read_stream, write_stream):
        await mcp_server.run(read_stream, write_stream, mcp_server.create_initialization_options())


class _ServedTools:
    """The ``tools/list`` and ``tools/call`` handlers of one served registry."""

    __slots__ = ("_registry",)

    def __init__(self, registry: ToolRegistry) -> None:
        self._registry = registry

    async def list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        registry = self._registry
        tools = [
            mcp_tool(definition)
            for schema in registry.schemas()
            if (definition := registry.get(schema.name)) is not None
        ]
        return types.ListToolsResult(tools=tools)

    async def call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> dict[str, Any]:
        if self._registry.get(params.name) is None:
            raise MCPError(code=types.INVALID_PARAMS, message=f'unknown tool "{params.name}"')
        return call_tool_result(await _serve_call(self._registry, ctx, params))


def _request_end_reason(ctx: ServerRequestContext[Any]) -> str:
    """Why the SDK is cancelling this request's handler.

    The dispatcher marks a request the client cancelled (``cancel_requested``) before it
    cancels the handler's scope, so reading the mark here is race-free.  The SDK keeps
    the request's dispatch context on the session without a public accessor; this is the
    one place that reaches for it, and the tests pin each reason.
    """
    channel = getattr(ctx.session, "_request_outbound", None)
    requested = getattr(channel, "cancel_requested", None)
    if requested is not None and requested.is_set():
        return REQUEST_CANCELLED
    transport = getattr(channel, "transport", None)
    if getattr(transport, "kind", None) == "direct":
        return CALLER_CANCELLED
    return CONNECTION_CLOSED


def _execution_input(
    ctx: ServerRequestContext[Any],
    params: types.CallToolRequestParams,
    signal: CancelSignal,
    on_progress: Any,
) -> ToolExecutionInput:
    """The registry call of one request.

    The one place that reads the request (its id, arguments and ``_meta``) into a call:
    request metadata such as a trace context would be taken from ``ctx.meta`` here.
    """
    return ToolExecutionInput(
        call_id=str(ctx.request_id),
        name=params.name,
        arguments=params.arguments if params.arguments is not None else {},
        signal=signal,
        on_progress=on_progress,
    )


async def _serve_call(
    registry: ToolRegistry, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
) -> ToolResult:
    """Run one request's call; raise the SDK's cancellation if the request ended."""
    source = CancelSource()
    try:
        # Free unless cancelled: the request can end before its handler first runs (its
        # cancel notice, or the connection's end, read right behind it).  Then the call
        # is pre-aborted: its body must not run.  The final checkpoint raises again.
        await trio.lowlevel.checkpoint_if_cancelled()
    except trio.Cancelled:
        source.cancel(_request_end_reason(ctx))
    progress = _Progress(ctx, source.signal)
    call = _execution_input(ctx, params, source.signal, progress.report)
    watch = _RequestWatch(ctx, source)
    outcome: list[ToolResult] = []
    async with trio.open_nursery() as nursery:
        progress.nursery = nursery
        nursery.start_soon(watch.run)
        # Shielded: the request's end must reach the call as its signal, with a reason,
        # not as an anonymous Cancelled, so the call is awaited to quiescence and
        # published as ABORTED.
        with trio.CancelScope(shield=True):
            try:
                outcome.append(await registry.execute(call))
            finally:
                progress.close()
                watch.stop()
    # The request ended while the call ran: its cancellation comes back here, so the SDK
    # writes no response for it.
    await trio.lowlevel.checkpoint_if_cancelled()
    [result] = outcome
    return result


class _RequestWatch:
    """Fires a call's source the moment the SDK cancels the request's handler.

    A task parked in ``wait_task_rescheduled`` inside the handler's scopes: Trio calls its
    abort function synchronously when an enclosing scope is cancelled, which is exactly
    when the call must hear it.  The abort is refused, so the task stays parked, raising
    nothing, until ``stop()`` wakes it once the call is done; the handler's own task then
    meets the request's cancellation at its next checkpoint.
    """

    __slots__ = ("_ctx", "_done", "_source", "_task")

    def __init__(self, ctx: ServerRequestContext[Any], source: CancelSource) -> None:
        self._ctx = ctx
        self._source = source
        self._task: trio.lowlevel.Task | None = None
        self._done = False

    async def run(self) -> None:
        if self._done:  # the call finished before this task first ran
            return
        self._task = trio.lowlevel.current_task()
        await trio.lowlevel.wait_task_rescheduled(self._abort)

    def _abort(self, raise_cancel: Any) -> trio.lowlevel.Abort:
        if not self._done:
            self._source.cancel(_request_end_reason(self._ctx))
        return trio.lowlevel.Abort.FAILED

    def stop(self) -> None:
        self._done = True
        task, self._task = self._task, None
        if task is not None:
            trio.lowlevel.reschedule(task)


class _Progress:
    """Forwards a call's progress reports to the client, in order, from one task."""

    __slots__ = ("_count", "_ctx", "_receive", "_send", "_signal", "nursery")

    def __init__(self, ctx: ServerRequestContext[Any], signal: CancelSignal) -> None:
        self._ctx = ctx
        self._signal = signal
        self._count = 0
        self._send: trio.MemorySendChannel[object] | None = None
        self._receive: trio.MemoryReceiveChannel[object] | None = None
        self.nursery: trio.Nursery | None = None

    def report(self, progress: object) -> None:
        """The call's ``on_progress``: synchronous, so queue it for the forwarding task."""
        if self._send is None:
            if self.nursery is None:
                return
            # Started on the first report: most calls report nothing.
            self._send, self._receive = trio.open_memory_channel[object](math.inf)
            self.nursery.start_soon(self._forward, self._receive)
        self._send.send_nowait(progress)

    def close(self) -> None:
        """No more reports: the forwarding task sends what is queued, then ends."""
        if self._send is not None:
            self._send.close()

    async def _forward(self, receive: trio.MemoryReceiveChannel[object]) -> None:
        # Shielded like the call, so it drains what the call reported before the response
        # goes out; bound to the call's signal instead: once the request ended, nothing
        # more may be sent for it.
        with trio.CancelScope(shield=True), self._signal.open_scope():
            async with receive:
                async for progress in receive:
                    self._count += 1
                    value, total, message = progress_to_mcp(progress, self._count)
                    try:
                        await self._ctx.session.report_progress(value, total, message)
                    except Exception:
                        logger.exception("could not send an MCP progress notification")
