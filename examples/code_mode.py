"""Code Mode: the model writes one program that calls many tools.

``run_code`` runs a Python program in a child process, on asyncio.  Inside it,
``await tools.NAME(**arguments)`` is a nested call of the registry (hooks, observers, its
own result), with the outer call's token as ``parent`` and a signal derived from the outer
call's: cancel the outer call and every nested call is cancelled, the child is killed and
reaped, and only then does ``run_code`` return.

Three rounds:

1. a program that fetches three pages concurrently (``asyncio.gather``) and handles a
   denied call (``ToolError``);
2. a program that fails: ``CODE_RUN_FAILED`` with what it printed;
3. the user presses "stop" while a fetch is running: the fetch is ``ABORTED``, the outer
   call is ``ABORTED`` too, and no child process is left.

Run it with ``.venv/bin/python examples/code_mode.py``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import attrs
import trio

import trio_tools
from trio_tools.code_mode import SubprocessRuntime, run_code_tool, sdk_stub

registry = trio_tools.ToolRegistry()


@attrs.frozen
class FetchArgs:
    url: str
    seconds: float = 0.05


slow_fetch_started = trio.Event()


@registry.tool(concurrency_safe=True)
async def fetch(args: FetchArgs, ctx: trio_tools.ToolRunContext) -> str:
    """Fetch a page (this demo only takes its time)."""
    if args.seconds > 1:
        slow_fetch_started.set()
    await trio.sleep(args.seconds)
    return f"<page {args.url}>"


@attrs.frozen
class DeleteArgs:
    path: str


@registry.tool
async def delete_file(args: DeleteArgs, ctx: trio_tools.ToolRunContext) -> str:
    """Delete a file."""
    return f"deleted {args.path}"


async def no_deletes(
    exec: trio_tools.ToolExecution,
    call_next: Callable[[], Awaitable[trio_tools.PreDecision]],
) -> trio_tools.PreDecision:
    """Policy: programs may read, not delete."""
    if exec.name == "delete_file" and exec.parent is not None:
        return trio_tools.Deny("programs may not delete files")
    return await call_next()


def trace(exec: trio_tools.ToolExecution, result: trio_tools.ToolResult) -> None:
    """Result observer: every call's one result, nested ones indented."""
    indent = "  " if exec.parent is not None else ""
    print(f"{indent}result {exec.call_id} ({exec.name}): {result.code or 'OK'}")


registry.add_pre_execute(no_deletes)
registry.add_observer(trace)
# Register run_code last: its description embeds a stub of the tools registered so far.
registry.register(run_code_tool(registry, runtime=SubprocessRuntime(grace_period=1.0)))

PROGRAM = """
pages = await asyncio.gather(*(tools.fetch(url=u) for u in ("a", "b", "c")))
print("fetched:", ", ".join(pages))
try:
    await tools.delete_file(path="notes.txt")
except ToolError as error:
    print("refused:", error.code, error.message)
"""

FAILING = """
print("starting")
await tools.fetch(url="a")
raise ValueError("the page did not parse")
"""

SLOW = """
print("fetching the archive")
await tools.fetch(url="archive", seconds=30)
"""


async def run(call_id: str, code: str, source: trio_tools.CancelSource) -> None:
    call = trio_tools.ToolExecutionInput(
        call_id=call_id, name="run_code", arguments={"code": code}, signal=source.signal
    )
    result = await registry.execute(call)
    print(f"{call_id} returned {result.code or 'OK'}:")
    for block in result.content:
        if isinstance(block, trio_tools.TextBlock):
            print("  | " + block.text.rstrip("\n").replace("\n", "\n  | "))


async def main() -> None:
    print("The stub the model sees:")
    print(sdk_stub(registry))

    print("round 1: a program calling tools")
    await run("step-1", PROGRAM, trio_tools.CancelSource())

    print()
    print("round 2: a program that raises")
    await run("step-2", FAILING, trio_tools.CancelSource())

    print()
    print('round 3: "stop" while a nested call runs')
    source = trio_tools.CancelSource()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(run, "step-3", SLOW, source)
        await slow_fetch_started.wait()
        print('-- the user presses "stop" --')
        source.cancel("the user pressed stop")


if __name__ == "__main__":
    trio.run(main)
