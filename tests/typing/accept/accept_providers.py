"""Accepted: the provider converters' types, as a loop written against them sees them."""

from __future__ import annotations

import typing
from typing import Any

import trio_tools
from trio_tools import BatchOutcome, ToolCall
from trio_tools.providers import anthropic, openai_chat, openai_responses

registry = trio_tools.ToolRegistry()


def convert(message: object, outcome: BatchOutcome) -> None:
    typing.assert_type(openai_chat.tool_specs(registry, strict=True), list[dict[str, Any]])
    typing.assert_type(openai_responses.tool_specs(registry), list[dict[str, Any]])
    typing.assert_type(anthropic.tool_specs(registry, strict=False), list[dict[str, Any]])
    calls = openai_chat.tool_calls(message, registry=registry)
    typing.assert_type(calls, tuple[ToolCall, ...])
    typing.assert_type(openai_responses.tool_calls(message), tuple[ToolCall, ...])
    typing.assert_type(anthropic.tool_calls(message, registry=None), tuple[ToolCall, ...])
    typing.assert_type(openai_chat.tool_results(calls, outcome), list[dict[str, Any]])
    typing.assert_type(openai_responses.tool_results(list(calls), outcome), list[dict[str, Any]])
    typing.assert_type(anthropic.tool_results(calls, outcome), list[dict[str, Any]])
    assembler = anthropic.StreamAssembler()
    assembler.feed({"type": "message_stop"})
    typing.assert_type(assembler.tool_calls(), tuple[ToolCall, ...])
    chat = openai_chat.StreamAssembler()
    chat.feed({"choices": []})
    typing.assert_type(chat.tool_calls(registry=registry), tuple[ToolCall, ...])
