"""Shared helpers for the provider format tests: tools, a mixed batch, SDK type checks.

``conforms(tp, value)`` is how every output shape is checked against the SDKs' own param
types: a pydantic ``TypeAdapter`` over the SDK's ``TypedDict``, then every lazily validated
iterable drained (pydantic checks ``Iterable[X]`` items only when they are iterated), then
the validated value compared with the input (pydantic drops unknown keys and coerces in lax
mode, so a misspelled key or a wrong type shows up as a difference).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import attrs
import pydantic
import trio
import trio.testing

import trio_tools
from trio_tools import (
    AdditionalContext,
    BatchOutcome,
    ImageBlock,
    TextBlock,
    ToolCall,
    ToolRegistry,
    ToolRunContext,
)

# The fake model API of the examples (examples/fake_model_api): its reply builders and rules.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import fake_model_api as fake  # noqa: F401 - imported from here by the test modules

# A 1x1 transparent PNG.
PNG_B64 = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII="
)
SVG_B64 = "PHN2Zy8+"  # "<svg/>"


# -- checking shapes against the SDK types ---------------------------------------------


def _drain(value: object) -> object:
    if isinstance(value, dict):
        return {key: _drain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_drain(item) for item in value]
    if isinstance(value, Iterator):
        return [_drain(item) for item in value]
    return value


_ADAPTERS: dict[object, pydantic.TypeAdapter[Any]] = {}


def conforms(tp: object, value: object) -> None:
    """Raise ``AssertionError`` unless ``value`` is exactly a valid ``tp`` (an SDK type)."""
    adapter = _ADAPTERS.get(tp)
    if adapter is None:
        adapter = _ADAPTERS[tp] = pydantic.TypeAdapter(tp)
    try:
        validated = _drain(adapter.validate_python(value))
    except pydantic.ValidationError as exc:
        raise AssertionError(f"not a valid {tp!r}:\n{exc}") from None
    assert _drain(value) == validated, f"{tp!r} drops or changes parts of {value!r}"


def assert_plain_json(value: object) -> None:
    """Only exact ``dict``/``list``/``str``/``int``/``float``/``bool``/``None``, and mutable."""
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is dict:
            assert all(type(key) is str for key in item), item
            stack.extend(item.values())
        elif kind is list:
            stack.extend(item)
        else:
            assert kind in (str, int, float, bool, type(None)), f"{kind.__name__}: {item!r}"
    assert json.loads(json.dumps(value)) == value


# -- tools --------------------------------------------------------------------------------


@attrs.frozen
class WeatherArgs:
    city: str
    unit: Literal["celsius", "fahrenheit"] = "celsius"


@attrs.frozen
class Point:
    lat: float
    lon: float
    label: str | None = None


@attrs.frozen
class RouteArgs:
    start: Point
    end: Point
    via: list[Point] = attrs.Factory(list)
    mode: Literal["walk", "drive"] = "walk"
    max_km: int | None = None


@attrs.frozen
class TagArgs:
    counts: dict[str, int]


@attrs.frozen
class WriteArgs:
    path: str
    text: str


class Gates:
    """What the test tools need to coordinate with the test: set when the slow call runs."""

    def __init__(self) -> None:
        self.slow_started = trio.Event()


def build_registry(gates: Gates | None = None) -> ToolRegistry:
    """The tools every provider test uses (``gates`` for the one that waits)."""
    registry = ToolRegistry()
    gates = gates or Gates()

    @registry.tool(concurrency_safe=True)
    async def get_weather(args: WeatherArgs, ctx: ToolRunContext) -> str:
        """Current weather in a city."""
        ctx.defer_context(AdditionalContext("The user lives in Lyon.", source="memory"))
        return f"Sunny in {args.city}, 21 degrees {args.unit}"

    @registry.tool(concurrency_safe=True)
    async def screenshot(args: object, ctx: ToolRunContext) -> list[TextBlock | ImageBlock]:
        """Take a screenshot of the page."""
        ctx.defer_context(AdditionalContext("Screenshots are 1x1 pixels in this test."))
        return [
            TextBlock("the page"),
            ImageBlock("image/png", PNG_B64),
            ImageBlock("image/svg+xml", SVG_B64),
        ]

    @registry.tool(concurrency_safe=True)
    async def read_file(args: WriteArgs, ctx: ToolRunContext) -> str:
        """Fails: the disk is gone."""
        raise OSError("disk full")

    @registry.tool(concurrency_safe=True)
    async def slow_search(args: object, ctx: ToolRunContext) -> str:
        """Searches until stopped."""
        gates.slow_started.set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    @registry.tool  # exclusive: waits for the others, and is never started
    async def write_file(args: WriteArgs, ctx: ToolRunContext) -> str:
        """Write a file."""
        return f"wrote {args.path}"

    @registry.tool
    async def plan_route(args: RouteArgs, ctx: ToolRunContext) -> str:
        """Plan a route."""
        return f"{args.mode} via {len(args.via)} point(s), max {args.max_km}"

    return registry


# The model's calls for the mixed batch, as (id, name, arguments as JSON text).
MIXED_CALLS: list[tuple[str, str, str]] = [
    ("call_1", "get_weather", '{"city": "Lyon"}'),
    ("call_2", "screenshot", "{}"),
    ("call_3", "read_file", '{"path": "a.txt", "text": ""}'),
    ("call_4", "slow_search", '{"query": "trio"}'),
    ("call_5", "write_file", '{"path": "b.txt", "text": "hi"}'),
]

MIXED_CODES = [None, None, "TOOL_FAILED", "ABORTED", "ABORTED_BEFORE_DISPATCH"]


async def run_with_stop(
    registry: ToolRegistry, calls: list[ToolCall], gates: Gates
) -> BatchOutcome:
    """``run_tool_calls`` with the user pressing stop once the slow call is running and
    everything else that could run has finished."""
    source = trio_tools.CancelSource()
    async with trio.open_nursery() as nursery:

        async def press_stop() -> None:
            await gates.slow_started.wait()
            await trio.testing.wait_all_tasks_blocked()
            source.cancel("the user pressed stop")

        nursery.start_soon(press_stop)
        outcome = await trio_tools.run_tool_calls(registry, calls, signal=source.signal)
    return outcome


async def mixed_outcome() -> tuple[list[ToolCall], BatchOutcome]:
    """The mixed batch: success (with a context), images (one unsupported), an error,
    ``ABORTED``, and a synthetic ``ABORTED_BEFORE_DISPATCH``."""
    gates = Gates()
    registry = build_registry(gates)
    calls = [ToolCall(*call) for call in MIXED_CALLS]
    outcome = await run_with_stop(registry, calls, gates)
    assert MIXED_CODES == [result.code for result in outcome.results]
    assert outcome.results[4].synthetic
    return calls, outcome


def splits(text: str) -> Iterator[list[str]]:
    """``text`` cut in two at every character boundary (both ends included), then cut
    into single characters."""
    for index in range(len(text) + 1):
        yield [text[:index], text[index:]]
    yield list(text)
