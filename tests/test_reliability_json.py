"""Arguments at the edges of JSON: raw JSON text from the model, the nesting limit, and
hand-made frozen mappings; and a journal's balance check with odd calls."""

from __future__ import annotations

import math
from typing import Any

import attrs
import pytest
import trio
from helpers_registry import TOOL, Harness, error, ok, too_deep

from trio_tools import (
    MemoryJournal,
    ToolCall,
    ToolExecutionInput,
    ToolResult,
    ToolRunContext,
    run_tool_calls,
)
from trio_tools._json import MAX_DEPTH, FrozenDict, freeze


@attrs.frozen
class Limits:
    timeout: float = 1.0
    count: int = 0


def invalid(violations: str) -> ToolResult:
    return error("ToolArgsError", "INVALID_ARGS", f"invalid arguments: {violations}")


async def run_text(h: Harness, *texts: object) -> tuple[ToolResult, ...]:
    calls = [ToolCall(f"c{i}", TOOL, text) for i, text in enumerate(texts)]
    journal = MemoryJournal()
    outcome = await run_tool_calls(h.registry, calls, signal=h.signal, journal=journal)
    journal.assert_balanced()
    return outcome.results


def typed_tool(h: Harness) -> list[Limits]:
    seen: list[Limits] = []

    @h.registry.tool(name=TOOL)
    async def body(args: Limits, ctx: ToolRunContext) -> str:
        seen.append(args)
        return "done"

    return seen


# -- JSON text ---------------------------------------------------------------------------


@pytest.mark.parametrize("digits", [4301, 20_000])
async def test_json_text_integers_of_any_size_parse_losslessly(digits: int) -> None:
    h = Harness()
    seen = typed_tool(h)
    number = (10**digits - 1) // 9 * 7  # "777...7", without Python's digit limit
    text = '{"count": ' + "7" * digits + "}"
    assert (ok("done"),) == await run_text(h, text)
    assert [Limits(count=number)] == seen


async def test_a_raw_tool_gets_a_huge_int_from_json_text_exactly() -> None:
    h = Harness()

    @h.registry.tool(name=TOOL)
    async def body(args: object, ctx: ToolRunContext) -> object:
        return args

    text = "[-" + "9" * 5000 + "]"
    assert (ok(text),) == await run_text(h, text)


@pytest.mark.parametrize(
    ("text", "violations"),
    [
        ('{"timeout": 1e400}', "$.timeout: number out of range"),
        ('{"timeout": -1e999, "count": 1}', "$.timeout: number out of range"),
    ],
)
async def test_a_number_too_large_for_a_float_is_invalid_args_at_its_path(
    text: str, violations: str
) -> None:
    h = Harness()
    seen = typed_tool(h)
    assert (invalid(violations),) == await run_text(h, text)
    assert [] == seen


async def test_every_out_of_range_number_is_listed_with_its_path() -> None:
    h = Harness()

    @h.registry.tool(name=TOOL)
    async def body(args: dict[str, Any], ctx: ToolRunContext) -> str:
        return "done"

    text = '{"a": [1, 1e400], "b c": {"d": -2e308}}'
    expected = invalid('$.a[1]: number out of range; $["b c"].d: number out of range')
    assert (expected,) == await run_text(h, text)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("{not json", "Expecting property name enclosed in double quotes at line 1 column 2"),
        (
            '{"timeout": 1,}',
            "Expecting property name enclosed in double quotes at line 1 column 15",
        ),
        ('{\n  "timeout": 1\n  "count": 2}', "Expecting ',' delimiter at line 3 column 3"),
        ('{"timeout": NaN}', "NaN is not allowed at line 1 column 13"),
        ('{"s": "Infinity", "timeout": -Infinity}', "-Infinity is not allowed at line 1 column 30"),
        ("[1] [2]", "Extra data at line 1 column 5"),
    ],
)
async def test_text_that_is_not_json_says_so_with_its_position(text: str, reason: str) -> None:
    """So the model learns its JSON was malformed (not ``$: expected object, got str``)."""
    h = Harness()
    seen = typed_tool(h)
    assert (invalid(f"not valid JSON ({reason})"),) == await run_text(h, text)
    assert [] == seen


async def test_a_raw_tool_still_receives_text_that_is_not_json() -> None:
    h = Harness()

    @h.registry.tool(name=TOOL)
    async def body(args: object, ctx: ToolRunContext) -> object:
        return {"got": args}

    assert (ok('{"got":"{not json"}'), ok('{"got":"1e400"}')) == await run_text(
        h, "{not json", "1e400"
    )


async def test_json_text_arguments_reach_a_concurrency_predicate_parsed() -> None:
    h = Harness()
    flags: list[object] = []

    def safe(args: Limits) -> bool:
        flags.append(args)
        return True

    @h.registry.tool(name=TOOL, concurrency_safe=safe)
    async def body(args: Limits, ctx: ToolRunContext) -> str:
        return "done"

    big = "1" * 5000
    assert (ok("done"), invalid("not valid JSON (Expecting value at line 1 column 1)")) == (
        await run_text(h, '{"count": ' + big + "}", "oops")
    )
    assert [Limits(count=(10**5000 - 1) // 9)] == flags


# -- the nesting limit -------------------------------------------------------------------------


def nested_text(depth: int) -> str:
    return '{"a": ' + "[" * (depth - 1) + "]" * (depth - 1) + "}"


def nested_value(depth: int) -> object:
    value: object = []
    for _ in range(depth - 2):
        value = [value]
    return {"a": value}


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 700, 5000])
async def test_too_deep_arguments_are_the_same_not_json_as_a_value_and_as_text(
    depth: int,
) -> None:
    """One limit, one code, one message, whichever form the arguments came in."""
    h = Harness()
    seen = typed_tool(h)
    as_value = await h.execute(arguments=nested_value(depth))
    (as_text,) = await run_text(h, nested_text(depth))
    assert too_deep("execution arguments") == as_value == as_text
    assert [] == seen


async def test_arguments_at_the_nesting_limit_pass_as_value_and_as_text() -> None:
    h = Harness()

    @h.registry.tool(name=TOOL)
    async def body(args: object, ctx: ToolRunContext) -> str:
        return "done"

    assert ok("done") == await h.execute(arguments=nested_value(MAX_DEPTH))
    assert (ok("done"),) == await run_text(h, nested_text(MAX_DEPTH))


# -- hand-made frozen mappings -----------------------------------------------------------------


@pytest.mark.parametrize("bad", [{1, 2}, [1, 2], {"x": b"bytes"}, float("nan")], ids=repr)
async def test_a_hand_made_frozen_mapping_is_validated_like_a_dict(bad: object) -> None:
    """Only a mapping the library froze may skip validation."""
    h = Harness()
    seen: list[object] = []

    @h.registry.tool(name=TOOL)
    async def body(args: object, ctx: ToolRunContext) -> str:
        seen.append(args)
        return "done"

    hand_made = FrozenDict({"value": bad})
    nested = {"outer": FrozenDict({"value": bad})}
    if isinstance(bad, list):
        # A list is JSON: it is frozen (to a tuple) instead of being kept mutable.
        assert ok("done") == await h.execute(arguments=hand_made)
        assert ok("done") == await h.execute(arguments=nested)
        assert [{"value": (1, 2)}, {"outer": {"value": (1, 2)}}] == seen
        assert type(seen[0]["value"]) is tuple  # type: ignore[index]
        return
    not_json = error(
        "TypeError", "NOT_JSON", "tool execution arguments must be losslessly JSON-serializable"
    )
    assert not_json == await h.execute(arguments=hand_made)
    assert not_json == await h.execute(arguments=nested)
    assert [] == seen


def test_a_mapping_the_library_froze_is_reused_as_is() -> None:
    frozen = freeze({"a": [1, {"b": 2}]})
    assert frozen is freeze(frozen)
    assert freeze({"x": frozen})["x"] is frozen  # type: ignore[index]
    assert freeze(FrozenDict({"a": 1})) == {"a": 1}


# -- the journal's balance check ----------------------------------------------------------


async def test_a_nan_argument_balances_its_journal() -> None:
    """``NOT_JSON`` for the call, and the same call object on both events: balanced."""
    h = Harness()
    typed_tool(h)
    journal = MemoryJournal()
    calls = [ToolCall("c1", TOOL, float("nan")), ToolCall("c2", TOOL, {"timeout": math.nan})]
    assert calls[0] != calls[0]  # so equality cannot tell whether the result is its call's
    outcome = await run_tool_calls(h.registry, calls, signal=h.signal, journal=journal)
    assert ["NOT_JSON", "NOT_JSON"] == [result.code for result in outcome.results]
    journal.assert_balanced()


async def test_call_ids_may_repeat_across_batches_once_closed() -> None:
    h = Harness()
    typed_tool(h)
    journal = MemoryJournal()
    for _ in range(3):
        calls = [ToolCall("call_0", TOOL, {}), ToolCall("call_1", TOOL, {})]
        await run_tool_calls(h.registry, calls, signal=h.signal, journal=journal)
    journal.assert_balanced()


async def test_an_open_call_id_recorded_again_is_still_a_violation() -> None:
    journal = MemoryJournal()
    first, second = ToolCall("c", TOOL, {}), ToolCall("c", TOOL, {})
    await journal.record_call(first)
    await journal.record_call(second)
    with pytest.raises(AssertionError, match="'c' is recorded twice"):
        journal.assert_balanced()


async def test_a_result_for_an_equal_but_different_call_is_a_violation() -> None:
    journal = MemoryJournal()
    call = ToolCall("c", TOOL, {})
    await journal.record_call(call)
    await journal.record_result(ToolCall("c", TOOL, {}), ok("done"))
    with pytest.raises(AssertionError, match="carries"):
        journal.assert_balanced()


async def test_a_second_result_after_a_call_closed_is_a_violation() -> None:
    journal = MemoryJournal()
    call = ToolCall("c", TOOL, {})
    await journal.record_call(call)
    await journal.record_result(call, ok("done"))
    await journal.record_result(call, ok("again"))
    with pytest.raises(AssertionError, match="more than one result"):
        journal.assert_balanced()


async def test_direct_execute_of_a_json_string_value_is_not_parsed() -> None:
    """A ``str`` given straight to ``execute`` is a JSON string value, not JSON text."""
    h = Harness()

    @h.registry.tool(name=TOOL)
    async def body(args: object, ctx: ToolRunContext) -> object:
        return {"got": args}

    call = ToolExecutionInput(call_id="c", name=TOOL, arguments="{not json", signal=h.signal)
    assert ok('{"got":"{not json"}') == await h.registry.execute(call)
    await trio.lowlevel.checkpoint()
