"""End to end: the real ``AsyncOpenAI`` / ``AsyncAnthropic`` clients under ``trio.run``.

Each test starts the fake model API (``examples/fake_model_api``: h11 over Trio, 127.0.0.1,
a free port), asks it for tool calls, runs them with ``run_tool_calls`` while the user
presses stop mid-batch, and sends the results back; the fake server rejects the follow-up
unless every call is answered once, in order, and the test then checks the body it got
(images where the API wants them).  Each has a streaming variant.  Real clock: the clients
do real network I/O (under a virtual clock their timeouts would jump).  The clients are
always used with ``async with``: their ``__del__`` assumes asyncio.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic as anthropic_sdk
import openai
import pytest
from helpers_providers import (
    MIXED_CALLS,
    MIXED_CODES,
    PNG_B64,
    Gates,
    build_registry,
    fake,
    run_with_stop,
)

from trio_tools import ToolCall
from trio_tools.providers import anthropic, openai_chat, openai_responses

USER = "What is the weather in Lyon? Then take a screenshot."
DATA_URL = f"data:image/png;base64,{PNG_B64}"
FINAL = "It is sunny in Lyon."
TIMEOUT = 20.0


REPLIES: dict[str, tuple[Any, Any, Any, str]] = {
    # path: (check, JSON reply, streamed reply, the conversation's key in the body)
    "/v1/chat/completions": (fake.check_chat, fake.chat_completion, fake.chat_stream, "messages"),
    "/v1/responses": (fake.check_responses, fake.response, fake.responses_stream, "input"),
    "/v1/messages": (
        fake.check_anthropic,
        fake.anthropic_message,
        fake.anthropic_stream,
        "messages",
    ),
}


def scripted(path: str, body: dict[str, Any]) -> Any:
    """The fake model: tool calls first; once they are answered (checked), a final text."""
    check, json_reply, stream_reply, key = REPLIES[path]
    reply = stream_reply if body.get("stream") else json_reply
    conversation = body[key]
    if len(conversation) == 1:
        return reply(calls=MIXED_CALLS)
    check(conversation)
    return reply(text=FINAL)


def openai_client(server: fake.FakeModelServer) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=f"{server.base_url}/v1", api_key="test", max_retries=0, timeout=TIMEOUT
    )


# The openai SDK stops reading a chat stream at ``data: [DONE]`` without closing its inner
# async generators; under Trio their finalizer warns (and then closes them).  Not ours.
SDK_DONE_WARNING = "ignore:Async generator .* was garbage collected:ResourceWarning"


@pytest.mark.filterwarnings(SDK_DONE_WARNING)
@pytest.mark.parametrize("stream", ["json", "stream", "helper"])
async def test_openai_chat_end_to_end(stream: str) -> None:
    """``helper``: the SDK's ``client.chat.completions.stream()``, whose events wrap the
    chunks (``ChunkEvent``) and repeat them (``content.delta``, ``tool_calls...delta``)."""
    gates = Gates()
    registry = build_registry(gates)
    tools: Any = openai_chat.tool_specs(registry)
    async with fake.serve(scripted) as server, openai_client(server) as client:
        messages: list[Any] = [{"role": "user", "content": USER}]
        if stream != "json":
            assembler = openai_chat.StreamAssembler()
            if stream == "helper":
                async with client.chat.completions.stream(
                    model="fake-model", messages=messages, tools=tools
                ) as events:
                    async for event in events:
                        assembler.feed(event)
            else:
                async with await client.chat.completions.create(
                    model="fake-model", messages=messages, tools=tools, stream=True
                ) as chunks:
                    async for chunk in chunks:
                        assembler.feed(chunk)
            calls = assembler.tool_calls(registry=registry)
            assistant: dict[str, Any] = {
                "role": "assistant",
                "tool_calls": [
                    {
                        "id": call.call_id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments},
                    }
                    for call in calls
                ],
            }
        else:
            completion = await client.chat.completions.create(
                model="fake-model", messages=messages, tools=tools
            )
            message = completion.choices[0].message
            calls = openai_chat.tool_calls(message, registry=registry)
            assistant = message.model_dump(exclude_none=True)
        assert tuple(ToolCall(*call) for call in MIXED_CALLS) == calls

        outcome = await run_with_stop(registry, list(calls), gates)
        assert MIXED_CODES == [result.code for result in outcome.results]
        messages += [assistant, *openai_chat.tool_results(calls, outcome)]
        final = await client.chat.completions.create(
            model="fake-model", messages=messages, tools=tools
        )

    assert FINAL == final.choices[0].message.content
    assert [] == server.rejected
    (_, first), (_, second) = server.requests
    assert json.loads(json.dumps(tools)) == first["tools"]
    sent = second["messages"]
    assert ["user", "assistant", "tool", "tool", "tool", "tool", "tool", "user"] == [
        m["role"] for m in sent
    ]
    assert [cid for cid, _, _ in MIXED_CALLS] == [m["tool_call_id"] for m in sent[2:7]]
    assert all(isinstance(m["content"], str) for m in sent[2:7])  # no image in a tool message
    images = [part for part in sent[7]["content"] if part["type"] == "image_url"]
    assert [{"type": "image_url", "image_url": {"url": DATA_URL}}] == images


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_openai_responses_end_to_end(stream: bool) -> None:
    gates = Gates()
    registry = build_registry(gates)
    tools: Any = openai_responses.tool_specs(registry)
    async with fake.serve(scripted) as server, openai_client(server) as client:
        items: list[Any] = [{"role": "user", "content": USER}]
        if stream:
            assembler = openai_responses.StreamAssembler()
            output: list[Any] = []
            async with await client.responses.create(
                model="fake-model", input=items, tools=tools, stream=True
            ) as events:
                async for event in events:
                    assembler.feed(event)
                    if event.type == "response.completed":
                        output = event.response.output
            calls = assembler.tool_calls(registry=registry)
        else:
            result = await client.responses.create(model="fake-model", input=items, tools=tools)
            output = result.output
            calls = openai_responses.tool_calls(result, registry=registry)
        assert tuple(ToolCall(*call) for call in MIXED_CALLS) == calls

        outcome = await run_with_stop(registry, list(calls), gates)
        items += [item.model_dump(exclude_none=True) for item in output]
        items += openai_responses.tool_results(calls, outcome)
        final = await client.responses.create(model="fake-model", input=items, tools=tools)

    assert FINAL == final.output_text
    assert [] == server.rejected
    (_, first), (_, second) = server.requests
    assert json.loads(json.dumps(tools)) == first["tools"]
    outputs = [item for item in second["input"] if item.get("type") == "function_call_output"]
    assert [cid for cid, _, _ in MIXED_CALLS] == [item["call_id"] for item in outputs]
    assert {"type": "input_image", "image_url": DATA_URL, "detail": "auto"} in outputs[1]["output"]
    assert "user" == second["input"][-1]["role"]  # the contexts, after the results


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_anthropic_end_to_end(stream: bool) -> None:
    gates = Gates()
    registry = build_registry(gates)
    tools: Any = anthropic.tool_specs(registry)
    async with (
        fake.serve(scripted) as server,
        anthropic_sdk.AsyncAnthropic(
            base_url=server.base_url, api_key="test", max_retries=0, timeout=TIMEOUT
        ) as client,
    ):
        messages: list[Any] = [{"role": "user", "content": USER}]
        if stream:
            assembler = anthropic.StreamAssembler()
            async with client.messages.stream(
                model="fake-model", max_tokens=100, messages=messages, tools=tools
            ) as events:
                async for event in events:
                    assembler.feed(event)
                message = await events.get_final_message()
            calls = assembler.tool_calls(registry=registry)
            assert tuple(ToolCall(*call) for call in MIXED_CALLS) == calls  # JSON text
        else:
            message = await client.messages.create(
                model="fake-model", max_tokens=100, messages=messages, tools=tools
            )
            calls = anthropic.tool_calls(message, registry=registry)
            expected = tuple(
                ToolCall(cid, name, json.loads(arguments)) for cid, name, arguments in MIXED_CALLS
            )
            assert expected == calls

        outcome = await run_with_stop(registry, list(calls), gates)
        assistant = {
            "role": "assistant",
            "content": [block.model_dump(exclude_none=True) for block in message.content],
        }
        messages += [assistant, *anthropic.tool_results(calls, outcome)]
        final = await client.messages.create(
            model="fake-model", max_tokens=100, messages=messages, tools=tools
        )

    assert [FINAL] == [block.text for block in final.content if block.type == "text"]
    assert [] == server.rejected
    (_, first), (_, second) = server.requests
    assert json.loads(json.dumps(tools)) == first["tools"]
    [*_, answer] = second["messages"]
    results = [block for block in answer["content"] if block["type"] == "tool_result"]
    assert [cid for cid, _, _ in MIXED_CALLS] == [block["tool_use_id"] for block in results]
    assert [False, False, True, True, True] == [block["is_error"] for block in results]
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64},
    }
    assert image in results[1]["content"]
    assert "text" == answer["content"][-1]["type"]  # the contexts, after the results


async def test_the_fake_server_rejects_unanswered_calls() -> None:
    """The check the end-to-end tests rely on can fail: a missing result is a 400."""
    async with fake.serve(scripted) as server, openai_client(server) as client:
        messages: list[Any] = [
            {"role": "user", "content": USER},
            fake.chat_completion(calls=MIXED_CALLS[:2])["choices"][0]["message"],
            {"role": "tool", "tool_call_id": "call_1", "content": "ok"},
        ]
        with pytest.raises(openai.BadRequestError, match="answered by"):
            await client.chat.completions.create(model="fake-model", messages=messages)
    assert 1 == len(server.rejected)
