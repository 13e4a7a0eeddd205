"""An agent loop with the real ``openai`` client: Chat Completions, strict tools, images.

The loop is the one you would write against OpenAI: send the conversation and the tools,
run the tool calls the model asks for with ``trio_tools.run_tool_calls``, append what
``trio_tools.providers.openai_chat.tool_results`` makes of the outcome, and ask again until
the model answers in text.  The model is a fake one (``examples/fake_model_api``), started
by this program on 127.0.0.1: it speaks the Chat Completions HTTP API to the real
``AsyncOpenAI`` client, follows a script, and rejects a conversation in which a tool call
is not answered exactly once, in order.

* The tools are sent with ``strict=True``: their schemas are rewritten so that every
  property is required (the optional ones nullable), and the ``null``\\ s the model sends
  for "not given" are dropped again by ``tool_calls(..., registry=registry)``, so the
  tools' defaults apply.
* The screenshot tool returns an image: Chat tool messages carry text only, so
  ``tool_results`` puts it in a ``user`` message after the tool messages.

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
from trio_tools.providers import openai_chat

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


# -- the model: a script behind a fake Chat Completions API --------------------------------

STEPS: list[list[fake.Call]] = [
    [
        # A strict model sends every property; null means "not given".
        ("call_1", "get_weather", json.dumps({"city": "Lyon", "unit": None})),
        ("call_2", "screenshot", json.dumps({"url": "https://example.org"})),
    ],
    [("call_3", "get_weather", json.dumps({"city": "Paris", "unit": "fahrenheit"}))],
]


def model(path: str, body: dict[str, Any]) -> dict[str, Any]:
    messages = body["messages"]
    fake.check_chat(messages)  # every tool call answered once, in order, or HTTP 400
    step = sum(1 for message in messages if message["role"] == "assistant")
    if step < len(STEPS):
        return fake.chat_completion(calls=STEPS[step])
    seen = [m["content"] for m in messages if m["role"] == "tool"]
    images = sum(
        1
        for m in messages
        if m["role"] == "user" and not isinstance(m["content"], str)
        for part in m["content"]
        if part["type"] == "image_url"
    )
    return fake.chat_completion(text=f"Done. I saw {len(seen)} tool results and {images} image(s).")


# -- the agent loop -------------------------------------------------------------------------


async def agent(client: openai.AsyncOpenAI, question: str) -> str:
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
        for call in calls:
            print(f"model calls {call.name}({call.arguments})")
        outcome = await trio_tools.run_tool_calls(registry, calls, signal=source.signal)
        for call, result in zip(calls, outcome.results, strict=True):
            text = " ".join(b.text for b in result.content if isinstance(b, trio_tools.TextBlock))
            print(f"  {call.call_id} -> {result.code or 'OK'}: {text}")
        messages.append(message.model_dump(exclude_none=True))
        messages.extend(openai_chat.tool_results(calls, outcome))


async def amain() -> None:
    # Always `async with` the client: its __del__ assumes asyncio.
    async with (
        fake.serve(model) as server,
        openai.AsyncOpenAI(
            base_url=f"{server.base_url}/v1", api_key="not-needed", max_retries=0
        ) as client,
    ):
        answer = await agent(client, "What is the weather in Lyon and Paris?")
    print(f"model: {answer}")
    print(
        f"requests the fake API received: {len(server.requests)}, rejected: {len(server.rejected)}"
    )


def main() -> None:
    trio.run(amain)


if __name__ == "__main__":
    main()
