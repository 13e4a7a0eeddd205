"""Mount an MCP server's tools into a :class:`~trio_tools.ToolRegistry`.

Each remote tool becomes a registry tool whose body makes one ``tools/call`` request
under the call's signal.  The body can only return content, so the exact remote result
(a trio_tools server's own, code and all) reaches the caller through one around-execute
wrapper per mount, which puts it in place of the body's success.
"""

# the package's modules share underscore helpers with each other:
# pyright: reportPrivateUsage=false
# run-time validation of values from untyped callers:
# pyright: reportUnnecessaryIsInstance=false

from __future__ import annotations

import weakref
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, cast

import anyio
import mcp.types as types
from mcp.client.client import Client
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError

from .._execution import ToolDefinition, ToolDispatchExecution, ToolRunContext
from .._input import ExecutionToken
from .._json import thaw
from .._registry import AroundWrapper, Registration, ToolRegistry
from .._results import INVALID_ARGS, TOOL_FAILED, ToolOutput, ToolResult, replace_result
from .._util import check_timeout_value
from ._convert import MCP_CONNECTION_LOST, progress_from_mcp, tool_result

__all__ = ["mount"]

_Stash = weakref.WeakKeyDictionary[ExecutionToken, ToolResult]


class MCPConnectionLostError(Exception):
    """The MCP connection closed before the remote tool answered."""

    code = MCP_CONNECTION_LOST


class MCPRequestError(Exception):
    """The MCP server answered ``tools/call`` with a JSON-RPC error (``TOOL_FAILED``)."""


class MCPRemoteError(Exception):
    """The remote result was an error: raised so that it beats a late cancellation.

    A tool failure beats cancellation, and a body can only report one by raising; the
    mount's wrapper then puts the exact remote result in place of the error this makes.
    """

    def __init__(self, result: ToolResult) -> None:
        error = result.error
        self.code = error.code if error is not None else TOOL_FAILED
        super().__init__(error.message if error is not None else "")


class ToolArgsError(Exception):
    """A mounted tool was called with arguments that are not a JSON object."""

    code = INVALID_ARGS


async def mount(
    registry: ToolRegistry,
    client: Client | ClientSession,
    *,
    prefix: str = "",
    # The mounted tools' own timeout (the registry enforces it per call), not this call's.
    timeout: float | None = None,  # noqa: ASYNC109
) -> Registration:
    """Register one tool per tool of the MCP server behind ``client``; return the undo.

    ``client`` is a connected ``mcp.Client`` or ``mcp.ClientSession`` (inside its
    ``async with``); the tools are listed once, now.  Each becomes a tool named
    ``prefix + name`` with the remote description and input schema (arguments are
    validated by the server, not locally), ``concurrency_safe`` from the remote
    ``readOnlyHint``, and ``timeout`` as its timeout (enforced by the registry's timeout
    policy like any tool's).

    A call sends ``tools/call`` under the call's signal.  When the signal fires the SDK
    sends ``notifications/cancelled`` and the body returns as soon as that notice is
    written: MCP has no acknowledgement of a cancel, so whether the remote work stopped
    cannot be confirmed; the result is ``ABORTED``.  Remote progress reaches
    ``ctx.report_progress`` as ``{"progress", "total", "message"}`` (without the fields the
    server left out).  The reply becomes the call's result: from a trio_tools server,
    exactly the result it published (code, contexts, halt and meta included); from any
    other server, its content, ``structuredContent`` as ``meta``, and ``isError`` as an
    error with code ``TOOL_FAILED``.  A connection that closes before the answer gives an
    error with code ``MCP_CONNECTION_LOST``; a JSON-RPC error reply, ``TOOL_FAILED``.

    Mounting adds one around-execute wrapper to ``registry`` (it hands the remote result
    to the caller).  The returned :class:`~trio_tools.Registration` removes every mounted
    tool and that wrapper.

    Raises:
        ValueError: a mounted name is already registered (nothing stays registered), or
            ``timeout`` is not a positive finite number.
        mcp.shared.exceptions.MCPError: listing the server's tools failed.
    """
    if not isinstance(prefix, str):
        raise TypeError(f"prefix must be a str, got {prefix!r}")
    check_timeout_value(timeout)
    remote_tools = await _list_tools(client)
    stash: _Stash = weakref.WeakKeyDictionary()
    definitions = [
        ToolDefinition(
            name=prefix + tool.name,
            description=tool.description or "",
            execute=_remote_call(client, tool.name, stash),
            args=None,
            parameters=tool.input_schema,
            timeout=timeout,
            concurrency_safe=tool.annotations is not None
            and tool.annotations.read_only_hint is True,
        )
        for tool in remote_tools
    ]
    undo: list[Registration] = []
    try:
        for definition in definitions:
            undo.append(registry.register(definition))
        if definitions:
            undo.append(registry.add_around_execute(_remote_results(stash)))
    except BaseException:
        for registration in reversed(undo):
            registration()
        raise

    def remove() -> None:
        for registration in reversed(undo):
            registration()

    return Registration._create(remove)


async def _list_tools(client: Client | ClientSession) -> list[types.Tool]:
    """Every tool of the server, page by page (a cursor seen twice ends the walk)."""
    tools: list[types.Tool] = []
    cursor: str | None = None
    seen: set[str] = set()
    while True:
        if isinstance(client, Client):
            page = await client.list_tools(cursor=cursor)
        else:
            page = await client.list_tools(
                params=None if cursor is None else types.PaginatedRequestParams(cursor=cursor)
            )
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None or cursor in seen:
            return tools
        seen.add(cursor)


def _request_meta(ctx: ToolRunContext) -> types.RequestParamsMeta | None:
    """The ``_meta`` of a mounted call's request: the one place it is made.

    None so far; request metadata such as a trace context for the remote side goes here.
    """
    return None


def _remote_call(
    client: Client | ClientSession, remote_name: str, stash: _Stash
) -> Callable[[object, ToolRunContext], Awaitable[object]]:
    async def call_remote_tool(arguments: object, ctx: ToolRunContext) -> object:
        if not isinstance(arguments, Mapping):
            raise ToolArgsError(f"invalid arguments: expected a JSON object, got {arguments!r}")
        plain = cast("dict[str, Any]", thaw(cast(object, arguments)))

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            ctx.report_progress(progress_from_mcp(progress, total, message))

        if _closed(client):
            raise MCPConnectionLostError("MCP connection lost: the client is closed")
        try:
            reply = await client.call_tool(
                remote_name, plain, progress_callback=on_progress, meta=_request_meta(ctx)
            )
        except MCPError as exc:
            if exc.code == types.CONNECTION_CLOSED:
                raise MCPConnectionLostError(f"MCP connection lost: {exc.message}") from None
            raise MCPRequestError(f"MCP error {exc.code}: {exc.message}") from None
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream):
            raise MCPConnectionLostError("MCP connection lost") from None
        result = tool_result(reply)
        stash[ctx.token] = result
        # Until the mount's wrapper (see _remote_results) puts the whole result in place,
        # an error stands in as a raise (it beats a cancellation that came meanwhile), a
        # success as its content and meta.
        if result.is_error:
            raise MCPRemoteError(result)
        return ToolOutput(content=result.content, meta=result.meta)

    call_remote_tool.__qualname__ = call_remote_tool.__name__ = f"mcp_tool_{remote_name}"
    return call_remote_tool


def _closed(client: Client | ClientSession) -> bool:
    """Whether ``client`` is an ``mcp.Client`` whose ``async with`` has exited.

    Its calls would raise ``RuntimeError``; a closed ``ClientSession`` already answers
    with the SDK's connection-closed error, which maps to the same code.
    """
    if not isinstance(client, Client):
        return False
    try:
        client.session  # noqa: B018 - the SDK's own check that the client is connected
    except RuntimeError:
        return True
    return False


def _remote_results(stash: _Stash) -> AroundWrapper:
    async def put_remote_result_in_place(
        execution: ToolDispatchExecution, call_next: Callable[[], Awaitable[ToolResult]]
    ) -> ToolResult:
        result = await call_next()
        remote = stash.pop(execution.token, None)
        # Only the body's own stand-in is replaced by the remote result: an error made
        # after it (cancellation, a timeout, an inner wrapper's) stays.
        if remote is None or not _stands_in(result, remote):
            return result
        if result.additional_contexts:
            return replace_result(
                remote, additional_contexts=result.additional_contexts + remote.additional_contexts
            )
        return remote

    return put_remote_result_in_place


def _stands_in(result: ToolResult, remote: ToolResult) -> bool:
    """Whether ``result`` is what the mounted body made of ``remote`` (see _remote_call)."""
    if not remote.is_error:
        return not result.is_error and result.content == remote.content
    error = result.error
    return (
        error is not None
        and error.name == MCPRemoteError.__name__
        and error.code == (remote.error.code if remote.error is not None else TOOL_FAILED)
    )
