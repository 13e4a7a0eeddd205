"""An agent loop with the real ``anthropic`` client: streaming, and the user pressing stop.

The loop is the one you would write against Anthropic's Messages API: stream the model's
turn through ``trio_tools.providers.anthropic.StreamAssembler``, run the tool calls with
``trio_tools.run_tool_calls``, answer them with the ``user`` message that
``tool_results`` makes (its ``tool_result`` blocks first, as the API requires), and ask
again until the model answers in text.  The model is a fake one
(``examples/fake_model_api``), started by this program on 127.0.0.1: it speaks the
Messages HTTP API (server-sent events included) to the real ``AsyncAnthropic`` client,
follows a script, and rejects a conversation in which a tool call is not answered
exactly once, in order.

In the second step the user presses stop while a slow search runs: the search comes back
``ABORTED`` (its body ran), the call after it never starts and gets a synthetic
``ABORTED_BEFORE_DISPATCH`` result, and the loop still sends every result, so the
conversation stays valid, with a note that the user stopped the turn.

Run it with ``.venv/bin/python examples/anthropic_agent.py`` (needs ``anthropic`` and
``h11``).
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import attrs
import fake_model_api as fake
import trio

import trio_tools
from trio_tools.providers import anthropic as claude

# -- the tools ------------------------------------------------------------------------------


@attrs.frozen
class SearchArgs:
    query: str


@attrs.frozen
class NoteArgs:
    text: str


registry = trio_tools.ToolRegistry()
search_started = trio.Event()


@registry.tool(concurrency_safe=True)
async def quick_search(args: SearchArgs, ctx: trio_tools.ToolRunContext) -> str:
    """Search a small index."""
    await trio.sleep(0.01)
    ctx.defer_context(trio_tools.AdditionalContext("Results are from a local index.", "search"))
    return f"2 hits for {args.query!r}"


@registry.tool(concurrency_safe=True)
async def deep_search(args: SearchArgs, ctx: trio_tools.ToolRunContext) -> str:
    """Search the whole web (slowly)."""
    search_started.set()
    await trio.sleep(60)  # the user stops it long before
    return f"200 hits for {args.query!r}"


@registry.tool  # exclusive: runs alone, after the searches
async def save_note(args: NoteArgs, ctx: trio_tools.ToolRunContext) -> str:
    """Save a note."""
    return f"saved {args.text!r}"


# -- the model: a script behind a fake Messages API ----------------------------------------

STEPS: list[list[fake.Call]] = [
    [("toolu_1", "quick_search", json.dumps({"query": "trio cancel scopes"}))],
    [
        ("toolu_2", "deep_search", json.dumps({"query": "structured concurrency"})),
        ("toolu_3", "save_note", json.dumps({"text": "read the Trio docs"})),
    ],
]


def model(path: str, body: dict[str, Any]) -> Any:
    messages = body["messages"]
    fake.check_anthropic(messages)  # every tool_use answered first, once, in order, or 400
    step = sum(1 for message in messages if message["role"] == "assistant")
    reply = fake.anthropic_stream if body.get("stream") else fake.anthropic_message
    if step < len(STEPS):
        return reply(text=f"Step {step + 1}.", calls=STEPS[step])
    return reply(text="Stopped, as you asked. Two searches ran; nothing was saved.")


# -- the agent loop -------------------------------------------------------------------------


async def stream_turn(client: anthropic.AsyncAnthropic, messages: list[Any]) -> Any:
    """One streamed model turn: the assembled calls, and the message to append."""
    assembler = claude.StreamAssembler()
    async with client.messages.stream(
        model="fake-model", max_tokens=1024, messages=messages, tools=claude.tool_specs(registry)
    ) as stream:
        async for event in stream:
            assembler.feed(event)
        message = await stream.get_final_message()
    assistant = {
        "role": "assistant",
        "content": [b.model_dump(exclude_none=True) for b in message.content],
    }
    text = " ".join(block.text for block in message.content if block.type == "text")
    return assembler.tool_calls(registry=registry), assistant, text


async def agent(client: anthropic.AsyncAnthropic, question: str) -> str:
    messages: list[Any] = [{"role": "user", "content": question}]
    source = trio_tools.CancelSource()  # the turn's lifetime: the stop button
    async with trio.open_nursery() as nursery:

        async def user_presses_stop() -> None:
            await search_started.wait()
            await trio.sleep(0.05)
            print("[the user presses stop]")
            source.cancel("the user pressed stop")

        nursery.start_soon(user_presses_stop)
        while True:
            calls, assistant, text = await stream_turn(client, messages)
            print(f"model: {text}")
            messages.append(assistant)
            if not calls:
                nursery.cancel_scope.cancel()  # the stop button is not needed any more
                return text
            for call in calls:
                print(f"  model calls {call.name}({call.arguments})")
            outcome = await trio_tools.run_tool_calls(registry, calls, signal=source.signal)
            for call, result in zip(calls, outcome.results, strict=True):
                synthetic = " (synthetic)" if result.synthetic else ""
                print(f"  {call.call_id} -> {result.code or 'OK'}{synthetic}")
            [answer] = claude.tool_results(calls, outcome)
            if outcome.aborted:
                answer["content"].append({"type": "text", "text": "I pressed stop. Stop here."})
            messages.append(answer)


async def amain() -> None:
    # Always `async with` the client: its __del__ assumes asyncio.
    async with (
        fake.serve(model) as server,
        anthropic.AsyncAnthropic(
            base_url=server.base_url, api_key="not-needed", max_retries=0
        ) as client,
    ):
        await agent(client, "Research structured concurrency, then save a note.")
    print(
        f"requests the fake API received: {len(server.requests)}, rejected: {len(server.rejected)}"
    )


def main() -> None:
    trio.run(amain)


if __name__ == "__main__":
    main()
