"""A trio_tools registry served over stdio, for tests/test_mcp_stdio_http.py.

Run as ``python mcp_stdio_server.py LOG``: it appends one JSON line per event to LOG
(its pid at start, each cancel reason its bodies hear, each published result), so the
test can see the server's side of a call from outside the process.
"""

from __future__ import annotations

import functools
import json
import os
import sys

import trio

import trio_tools
from trio_tools.mcp import serve_stdio


def main() -> None:
    log_path = sys.argv[1]

    def log(**event: object) -> None:
        with open(log_path, "a", encoding="utf-8") as log_file:
            log_file.write(json.dumps(event) + "\n")

    registry = trio_tools.ToolRegistry()

    @registry.tool(concurrency_safe=True)
    async def echo(args: object, ctx: trio_tools.ToolRunContext) -> object:
        """Return the arguments."""
        return args

    @registry.tool
    async def wait_for_stop(args: object, ctx: trio_tools.ToolRunContext) -> str:
        """Run until cancelled."""
        ctx.signal.add_listener(lambda reason: log(reason=reason.message))
        log(started=ctx.call_id)
        ctx.report_progress("started")
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    registry.add_observer(lambda execution, result: log(published=execution.name, code=result.code))
    log(pid=os.getpid())
    trio.run(functools.partial(serve_stdio, registry, name="stdio-test"))
    log(exited=True)


if __name__ == "__main__":
    main()
