"""Agent loops with the real ``openai`` client: Chat Completions, and Responses streamed.

Each loop is the one you would write against OpenAI: send the conversation and the tools,
run the tool calls the model asks for with ``trio_tools.run_tool_calls``, append what
``tool_results`` makes of the outcome, and ask again until the model answers in text.  The
model is a fake one (``examples/fake_model_api``), started by this program on 127.0.0.1:
it speaks the Chat Completions and Responses HTTP APIs to the real ``AsyncOpenAI`` client,
follows a script, and rejects a conversation in which a tool call is not answered exactly
once, in order.

* The tools are sent with ``strict=True``: their schemas are rewritten so that every
  property is required (the optional ones nullable), and the ``null``\\ s the model sends
  for "not given" are dropped again by ``tool_calls(..., registry=registry)``, so the
  tools' defaults apply.
* The screenshot tool returns an image: Chat tool messages carry text only, so
  ``openai_chat.tool_results`` puts it in a ``user`` message after the tool messages;
  ``openai_responses.tool_results`` puts it in the call's ``function_call_output``.
* The Responses loop streams the model's turn through ``openai_responses.StreamAssembler``.

Run it with ``.venv/bin/python examples/openai_agent.py`` (needs ``openai`` and ``h11``).
"""

from __future__ import annotations

import json
from typing import Any

import attrs
import fake_model_api as fake
import openai
import trio

import trio_tools
from trio_tools.providers import openai_chat, openai_responses

PIXEL = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII="
)

# -- the tools ------------------------------------------------------------------------------


@attrs.frozen
class WeatherArgs:
    city: str
    unit: str = "celsius"


@attrs.frozen
class ScreenshotArgs:
    url: str


registry = trio_tools.ToolRegistry()


@registry.tool(concurrency_safe=True)
async def get_weather(args: WeatherArgs, ctx: trio_tools.ToolRunContext) -> str:
    """The current weather in a city."""
    await trio.sleep(0.01)
    return f"Sunny in {args.city}, 21 degrees {args.unit}"


@registry.tool(concurrency_safe=True)
async def screenshot(
    args: ScreenshotArgs, ctx: trio_tools.ToolRunContext
) -> list[trio_tools.ContentBlock]:
    """A screenshot of a web page."""
    await trio.sleep(0.01)
    return [
        trio_tools.TextBlock(f"screenshot of {args.url}"),
        trio_tools.ImageBlock("image/png", PIXEL),
    ]


# -- the model: a script behind a fake OpenAI API -----------------------------------------

STEPS: list[list[fake.Call]] = [
    [
        # A strict model sends every property; null means "not given".
        ("call_1", "get_weather", json.dumps({"city": "Lyon", "unit": None})),
        ("call_2", "screenshot", json.dumps({"url": "https://example.org"})),
    ],
    [("call_3", "get_weather", json.dumps({"city": "Paris", "unit": "fahrenheit"}))],
]


def model(path: str, body: dict[str, Any]) -> Any:
    """Both APIs: the next step's calls, then a summary of the results it was sent."""
    if path == "/v1/chat/completions":
        conversation = body["messages"]
        fake.check_chat(conversation)  # every tool call answered once, in order, or HTTP 400
        answered = [m for m in conversation if m["role"] == "tool"]
        reply = fake.chat_stream if body.get("stream") else fake.chat_completion
    else:
        conversation = body["input"]
        fake.check_responses(conversation)  # the same rule for function_call items
        answered = [i for i in conversation if i.get("type") == "function_call_output"]
        reply = fake.responses_stream if body.get("stream") else fake.response
    answered_ids = {item.get("tool_call_id") or item.get("call_id") for item in answered}
    step = sum(1 for calls in STEPS if calls[0][0] in answered_ids)  # steps already answered
    if step < len(STEPS):
        return reply(calls=STEPS[step])
    images = json.dumps(conversation).count("data:image/png;base64,")
    return reply(text=f"Done. I saw {len(answered)} tool results and {images} image(s).")


# -- the agent loops ------------------------------------------------------------------------


def report(calls: tuple[trio_tools.ToolCall, ...], outcome: trio_tools.BatchOutcome) -> None:
    for call, result in zip(calls, outcome.results, strict=True):
        print(f"  {call.name}({call.arguments}) -> {result.code or 'OK'}: {result.text}")


async def chat_agent(client: openai.AsyncOpenAI, question: str) -> str:
    """Chat Completions: the assistant message, then one tool message per call."""
    tools: Any = openai_chat.tool_specs(registry, strict=True)
    messages: list[Any] = [{"role": "user", "content": question}]
    source = trio_tools.CancelSource()  # the turn's lifetime: a stop button would cancel it
    while True:
        completion = await client.chat.completions.create(
            model="fake-model", messages=messages, tools=tools
        )
        message = completion.choices[0].message
        calls = openai_chat.tool_calls(message, registry=registry)
        if not calls:
            return message.content or ""
        outcome = await trio_tools.run_tool_calls(registry, calls, signal=source.signal)
        report(calls, outcome)
        messages.append(message.model_dump(exclude_none=True))
        messages.extend(openai_chat.tool_results(calls, outcome))


async def responses_agent(client: openai.AsyncOpenAI, question: str) -> str:
    """The Responses API, streamed: the response's output items, then one output per call."""
    tools: Any = openai_responses.tool_specs(registry, strict=True)
    items: list[Any] = [{"role": "user", "content": question}]
    source = trio_tools.CancelSource()
    while True:
        assembler = openai_responses.StreamAssembler()
        output: list[Any] = []
        text = ""
        async with await client.responses.create(
            model="fake-model", input=items, tools=tools, stream=True
        ) as events:
            async for event in events:
                assembler.feed(event)
                if event.type == "response.completed":
                    output, text = event.response.output, event.response.output_text
        calls = assembler.tool_calls(registry=registry)
        if not calls:
            return text
        outcome = await trio_tools.run_tool_calls(registry, calls, signal=source.signal)
        report(calls, outcome)
        items.extend(item.model_dump(exclude_none=True) for item in output)
        items.extend(openai_responses.tool_results(calls, outcome))


async def amain() -> None:
    question = "What is the weather in Lyon and Paris?"
    # Always `async with` the client: its __del__ assumes asyncio.
    async with (
        fake.serve(model) as server,
        openai.AsyncOpenAI(
            base_url=f"{server.base_url}/v1", api_key="not-needed", max_retries=0
        ) as client,
    ):
        print("Chat Completions:")
        print(f"model: {await chat_agent(client, question)}")
        print("Responses API, streamed:")
        print(f"model: {await responses_agent(client, question)}")
    print(
        f"requests the fake API received: {len(server.requests)}, rejected: {len(server.rejected)}"
    )


def main() -> None:
    trio.run(amain)


if __name__ == "__main__":
    main()
