"""A tool that calls other tools through the registry, forwarding its signal and token.

``research`` fans out to three ``fetch`` calls.  Each nested call goes through the whole
pipeline (hooks, observers, its own result) and passes on, explicitly:

* ``signal=ctx.signal``: the outer body's signal, so cancelling the outer call cancels the
  nested ones (there is no implicit "current signal": the caller always says which lifetime
  a call belongs to);
* ``parent=ctx.token``: the outer call's identity, so every stage of the nested call can
  tell whose child it is (``exec.parent``);
* ``agent=ctx.agent``: the same opaque owner.

A pre-execute hook and a result observer trace the calls as a tree.  The second round
presses "stop" while the slowest ``fetch`` is still running: it comes back ``ABORTED``, the
ones that had finished keep their results, and the outer call is ``ABORTED`` too.

Run it with ``.venv/bin/python examples/nested_dispatch.py``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio

import trio_tools

registry = trio_tools.ToolRegistry()

# The tracer's memory: which call (and how deep) each token belongs to.
names: dict[trio_tools.ExecutionToken, str] = {}
depths: dict[trio_tools.ExecutionToken, int] = {}


def depth_of(exec: trio_tools.ToolExecution) -> int:
    return 0 if exec.parent is None else depths.get(exec.parent, 0) + 1


async def trace_start(
    exec: trio_tools.ToolExecution,
    call_next: Callable[[], Awaitable[trio_tools.PreDecision]],
) -> trio_tools.PreDecision:
    """Pre-execute hook: remember the call's token and print where it sits in the tree."""
    names[exec.token] = exec.call_id
    depths[exec.token] = depth = depth_of(exec)
    parent = "" if exec.parent is None else f"  (child of {names[exec.parent]})"
    print(f"{'  ' * depth}start  {exec.call_id}{parent}")
    return await call_next()


def trace_result(exec: trio_tools.ToolExecution, result: trio_tools.ToolResult) -> None:
    """Result observer: every call's one final result, children before their parent."""
    print(f"{'  ' * depth_of(exec)}result {exec.call_id}: {result.code or 'OK'}  {result.text}")


registry.add_pre_execute(trace_start)
registry.add_observer(trace_result)


@registry.tool(concurrency_safe=True)
async def fetch(url: str, seconds: float) -> str:
    """Fetch a page (this demo just takes its time)."""
    await trio.sleep(seconds)
    return f"<{url}: {seconds:g}s>"


@registry.tool
async def research(topic: str, *, ctx: trio_tools.ToolRunContext) -> str:
    """Research a topic by fetching a few pages at once."""
    pages = [("wiki", 0.1), ("news", 0.2), ("archive", 0.6)]
    results: list[trio_tools.ToolResult | None] = [None] * len(pages)

    async def fetch_one(index: int, site: str, seconds: float) -> None:
        nested = trio_tools.ToolExecutionInput(
            call_id=f"{ctx.call_id}/{site}",
            name="fetch",
            arguments={"url": f"https://{site}.example/{topic}", "seconds": seconds},
            signal=ctx.signal,  # the outer call's lifetime
            parent=ctx.token,  # the outer call's identity
            agent=ctx.agent,
        )
        results[index] = await registry.execute(nested)

    async with trio.open_nursery() as nursery:
        for index, (site, seconds) in enumerate(pages):
            nursery.start_soon(fetch_one, index, site, seconds)
    ok = [r for r in results if r is not None and not r.is_error]
    return f"{len(ok)} of {len(pages)} pages about {topic}"


async def press_stop_later(source: trio_tools.CancelSource, delay: float) -> None:
    await trio.sleep(delay)
    print(f'-- the user presses "stop" after {delay:g}s --')
    source.cancel("the user pressed stop")


async def main() -> None:
    print("round 1: nothing interrupts")
    source = trio_tools.CancelSource()
    call = trio_tools.ToolExecutionInput(
        call_id="research-1", name="research", arguments={"topic": "trio"}, signal=source.signal
    )
    await registry.execute(call)

    print()
    print("round 2: stop while the archive is still being fetched")
    source = trio_tools.CancelSource()
    call = trio_tools.ToolExecutionInput(
        call_id="research-2", name="research", arguments={"topic": "attrs"}, signal=source.signal
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(press_stop_later, source, 0.3)
        result = await registry.execute(call)
    print(f"the outer call returned {result.code}; the caller's signal: {source.signal.reason}")


if __name__ == "__main__":
    trio.run(main)
