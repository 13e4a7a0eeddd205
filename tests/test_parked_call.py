"""What an in-flight call keeps alive while its body is parked.

Every parked call's objects count (memory per call, and the cyclic collector walks them
all), so the registry holds only what the rest of the call uses: not the caller's
``ToolExecutionInput`` (nor the arguments it carries) once entry has read it.
"""

from __future__ import annotations

import gc
import threading
import weakref

import pytest
import trio
import trio.testing
from helpers_registry import add_passthrough_stages

from trio_tools import (
    TOOL_ABORTED,
    CancelSource,
    ToolExecutionInput,
    ToolRegistry,
    ToolResult,
    ToolRunContext,
)


def parking_registry(*, staged: bool, release: threading.Event) -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool
    async def park(args: object, ctx: ToolRunContext) -> str:
        """Waits until cancelled."""
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    @registry.tool
    def park_in_thread(args: object, ctx: ToolRunContext) -> str:
        """A sync body, waiting in its worker thread until released."""
        release.wait(timeout=30)
        return "released"

    if staged:
        add_passthrough_stages(registry)
        registry.add_observer(lambda exec, result: None)
    return registry


@pytest.mark.parametrize("tool", ["park", "park_in_thread"])
@pytest.mark.parametrize("staged", [False, True], ids=["no stages", "every stage"])
async def test_a_parked_call_does_not_keep_its_input(tool: str, staged: bool) -> None:
    release = threading.Event()
    registry = parking_registry(staged=staged, release=release)
    source = CancelSource()
    results: list[ToolResult] = []
    inputs: list[weakref.ref[ToolExecutionInput]] = []

    def new_input() -> ToolExecutionInput:
        input = ToolExecutionInput(
            call_id="call-1", name=tool, arguments={"a": [1, 2]}, signal=source.signal
        )
        inputs.append(weakref.ref(input))
        return input

    async def call() -> None:
        # Only the call to execute refers to the input (this frame keeps no local of it).
        results.append(await registry.execute(new_input()))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(call)
        await trio.testing.wait_all_tasks_blocked()
        gc.collect()
        alive = inputs[0]() is not None
        source.cancel("done")
        release.set()
    assert not alive, "the parked call keeps its ToolExecutionInput alive"
    assert [result.code for result in results] == [TOOL_ABORTED]
