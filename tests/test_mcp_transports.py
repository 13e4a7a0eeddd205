"""The real transports: a served registry in a child process over stdio, and over
streamable HTTP under Hypercorn's Trio worker on 127.0.0.1 (a free port)."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
from helpers_mcp import Published
from hypercorn.config import Config
from hypercorn.trio import serve
from mcp import Client, StdioServerParameters

import trio_tools
from trio_tools import CancelReason, CancelSource, ToolExecutionInput, ToolResult, ToolRunContext
from trio_tools.mcp import MCP_CONNECTION_LOST, mount, server
from trio_tools.mcp._server import CONNECTION_CLOSED, REQUEST_CANCELLED

SERVER_SCRIPT = Path(__file__).with_name("mcp_stdio_server.py")
# Real processes and sockets: real time, bounded.
DEADLINE = 20


def read_log(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


async def wait_for_log(path: Path, predicate: Any) -> list[dict[str, Any]]:
    with trio.fail_after(DEADLINE):
        # Another process writes the log: polling is the only way to see it.
        while not predicate(events := read_log(path)):  # noqa: ASYNC110
            await trio.sleep(0.02)
    return events


def process_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie still answers signal 0 until its parent reaps it; the SDK reaps its child.
    return False


async def wait_until_gone(pid: int) -> None:
    with trio.fail_after(DEADLINE):
        # Nothing notifies this process of another's exit: poll.
        while not process_gone(pid):  # noqa: ASYNC110
            await trio.sleep(0.02)


def call(
    name: str, arguments: object, cancel: trio_tools.CancelSignal, **kw: Any
) -> ToolExecutionInput:
    return ToolExecutionInput(
        call_id=f"c-{name}", name=name, arguments=arguments, signal=cancel, **kw
    )


@asynccontextmanager
async def stdio_client(log: Path) -> AsyncIterator[Client]:
    parameters = StdioServerParameters(
        command=sys.executable, args=[str(SERVER_SCRIPT), str(log)], cwd=str(log.parent)
    )
    async with Client(parameters, mode="legacy") as client:
        yield client


@pytest.mark.slow
async def test_stdio_server_serves_mounted_calls_and_hears_the_cancel(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    local = trio_tools.ToolRegistry()
    source = CancelSource()
    progress: list[object] = []
    results: list[ToolResult] = []
    async with stdio_client(log) as client:
        await mount(local, client, prefix="stdio_")
        echoed = await local.execute(call("stdio_echo", {"n": 10**20}, CancelSource().signal))
        async with trio.open_nursery() as nursery:

            async def slow() -> None:
                results.append(
                    await local.execute(
                        call("stdio_wait_for_stop", {}, source.signal, on_progress=progress.append)
                    )
                )

            nursery.start_soon(slow)
            await wait_for_log(log, lambda e: any("started" in x for x in e))
            source.cancel("stop")
        events = await wait_for_log(log, lambda e: any(x.get("code") == "ABORTED" for x in e))
    [pid] = [e["pid"] for e in events if "pid" in e]

    assert '{"n":100000000000000000000}' == echoed.content[0].text
    assert [{"progress": 1.0, "message": "started"}] == progress
    assert [trio_tools.TOOL_ABORTED] == [r.code for r in results]
    assert {"reason": REQUEST_CANCELLED} in events
    assert {"published": "wait_for_stop", "code": "ABORTED"} in events
    await wait_until_gone(pid)


@pytest.mark.slow
async def test_stdio_server_killed_mid_call_is_mcp_connection_lost(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    local = trio_tools.ToolRegistry()
    results: list[ToolResult] = []
    async with stdio_client(log) as client:
        await mount(local, client)
        async with trio.open_nursery() as nursery:

            async def slow() -> None:
                results.append(
                    await local.execute(call("wait_for_stop", {}, CancelSource().signal))
                )

            nursery.start_soon(slow)
            # The body is running in the server when the process dies.
            events = await wait_for_log(log, lambda e: any("started" in x for x in e))
            [pid] = [e["pid"] for e in events if "pid" in e]
            os.kill(pid, signal.SIGKILL)

    assert [MCP_CONNECTION_LOST] == [r.code for r in results]
    await wait_until_gone(pid)


@asynccontextmanager
async def http_server(app: Any) -> AsyncIterator[str]:
    """Serve ``app`` with Hypercorn's Trio worker on 127.0.0.1 (a free port); stop it after."""
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.errorlog = None
    config.graceful_timeout = 1
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        try:
            binds: list[str] = await nursery.start(
                lambda task_status: serve(
                    app, config, shutdown_trigger=stop.wait, task_status=task_status
                )
            )
            yield binds[0]
        finally:
            stop.set()
            with trio.move_on_after(DEADLINE) as cleanup:
                cleanup.shield = True  # the server must be stopped even when we are cancelled
                # Hypercorn's shutdown has no event to wait on but its tasks ending.
                while nursery.child_tasks:  # noqa: ASYNC110
                    await trio.sleep(0.01)
            nursery.cancel_scope.cancel()


# The SDK's HTTP client leaves httpx2/httpcore2 async generators to Trio's finalizer,
# which warns; that is the SDK's business, not something this test checks.
_HTTPX_GENERATORS = "ignore:Async generator 'http(x|core)2[.]:ResourceWarning"


@pytest.mark.slow
@pytest.mark.filterwarnings(_HTTPX_GENERATORS)
@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_streamable_http_under_hypercorn_trio(mode: str) -> None:
    remote = trio_tools.ToolRegistry()
    reasons: list[CancelReason] = []
    published = Published()
    started = trio.Event()

    @remote.tool(concurrency_safe=True)
    async def echo(args: object, ctx: ToolRunContext) -> object:
        return args

    @remote.tool
    async def wait_for_stop(args: object, ctx: ToolRunContext) -> str:
        ctx.signal.add_listener(reasons.append)
        started.set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    remote.add_observer(published)
    app = server(remote, name="http-test").streamable_http_app()
    local = trio_tools.ToolRegistry()
    source = CancelSource()
    results: list[ToolResult] = []
    async with http_server(app) as url, Client(f"{url}/mcp", mode=mode) as client:
        await mount(local, client)
        echoed = await local.execute(call("echo", {"a": [1, 2]}, CancelSource().signal))
        async with trio.open_nursery() as nursery:

            async def slow() -> None:
                results.append(await local.execute(call("wait_for_stop", {}, source.signal)))

            nursery.start_soon(slow)
            with trio.fail_after(DEADLINE):
                await started.wait()
            source.cancel("stop")
        await published.wait_for(2)

    assert '{"a":[1,2]}' == echoed.content[0].text
    assert [trio_tools.TOOL_ABORTED] == [r.code for r in results]
    assert [("echo", None), ("wait_for_stop", trio_tools.TOOL_ABORTED)] == [
        (name, result.code) for name, result in published
    ]
    # 2025 era: the notice; 2026 era over HTTP: the client closes the request's stream.
    expected = REQUEST_CANCELLED if mode == "legacy" else CONNECTION_CLOSED
    assert [CancelReason("CANCELLED", expected)] == reasons
