"""Accepted: a ToolExecutionInput is built with the caller's signal, and reads it back."""

from __future__ import annotations

import typing

import trio_tools


def build_input(source: trio_tools.CancelSource) -> trio_tools.ToolExecutionInput:
    full = trio_tools.ToolExecutionInput(
        call_id="call-1",
        name="read_file",
        arguments={"path": "README.md"},
        signal=source.signal,
        agent=None,
        parent=None,
        on_progress=print,
    )
    minimal = trio_tools.ToolExecutionInput(
        call_id="call-2", name="read_file", arguments={}, signal=full.signal
    )
    typing.assert_type(full.signal, trio_tools.CancelSignal)
    typing.assert_type(minimal.signal, trio_tools.CancelSignal)
    return minimal


async def derived_input(
    source: trio_tools.CancelSource, registry: trio_tools.ToolRegistry
) -> trio_tools.ToolResult:
    # A derived signal from open_signal is a CancelSignal like any other.
    async with trio_tools.open_signal(source.signal, timeout=5) as step_signal:
        typing.assert_type(step_signal, trio_tools.CancelSignal)
        call = trio_tools.ToolExecutionInput(
            call_id="call-3", name="read_file", arguments={}, signal=step_signal
        )
        return await registry.execute(call)
