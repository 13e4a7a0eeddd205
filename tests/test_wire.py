"""Wire forms: ``ToolCall`` / ``ToolResult`` ``.to_dict()`` and ``.from_dict()``."""

from __future__ import annotations

import copy
import json
from typing import Any

import attrs
import pytest
from hypothesis import given
from strategies import json_values, tool_calls, tool_results

from trio_tools import (
    TOOL_ABORTED_BEFORE_DISPATCH,
    AdditionalContext,
    ErrorInfo,
    Halt,
    ImageBlock,
    TextBlock,
    ToolCall,
    ToolResult,
)
from trio_tools._json import MAX_DEPTH, FrozenDict, freeze, to_compact_json
from trio_tools._results import aborted

PLAIN_JSON = (dict, list, str, int, float, bool, type(None))


def assert_plain_json(value: object) -> None:
    """Exactly the plain JSON types, all the way down (no tuples, no frozen mappings)."""
    assert type(value) in PLAIN_JSON, value
    if type(value) is dict:
        for key, item in value.items():  # type: ignore[attr-defined]
            assert type(key) is str
            assert_plain_json(item)
    elif type(value) is list:
        for item in value:  # type: ignore[attr-defined]
            assert_plain_json(item)


def small_ints(value: object) -> bool:
    """Whether every int in ``value`` fits ``json.loads`` (below the int digit limit)."""
    if type(value) is int:
        return len(str(abs(value))) < 4000
    if isinstance(value, list | tuple):
        return all(small_ints(item) for item in value)
    if isinstance(value, dict):
        return all(small_ints(item) for item in value.values())
    return True


# --------------------------------------------------------------------------------------
# Round trips


@given(tool_results())
def test_every_result_shape_round_trips(result: ToolResult) -> None:
    data = result.to_dict()
    assert_plain_json(data)
    assert 1 == data["v"]
    assert result == ToolResult.from_dict(data)


@given(tool_results())
def test_results_round_trip_through_json_text(result: ToolResult) -> None:
    text = to_compact_json(result.to_dict())
    assert result == ToolResult.from_dict(json.loads(text))


@given(tool_calls)
def test_every_call_round_trips(call: ToolCall) -> None:
    data = call.to_dict()
    assert_plain_json(data)
    assert call == ToolCall.from_dict(data)
    if small_ints(data):
        assert call == ToolCall.from_dict(json.loads(to_compact_json(data)))


@given(json_values)
def test_parsed_arguments_are_copied_not_shared(arguments: object) -> None:
    call = ToolCall("c1", "tool", arguments)
    data = call.to_dict()
    if isinstance(arguments, list | dict):
        assert data["arguments"] is not arguments
    back = ToolCall.from_dict(data)
    if isinstance(arguments, list | dict):
        assert back.arguments is not data["arguments"]


def test_result_wire_form_is_the_documented_one() -> None:
    result = ToolResult(
        content=[TextBlock("hi"), ImageBlock("image/png", "iVBOR")],
        is_error=True,
        error=ErrorInfo("ToolDeniedError", "DENIED", "no"),
        additional_contexts=[AdditionalContext("remember", "policy"), AdditionalContext("x")],
        meta=FrozenDict({"rows": (1, 2), "big": 2**70, "z": -0.0}),
        concludes_turn=False,
        halt=Halt("stop"),
        synthetic=False,
    )
    assert {
        "v": 1,
        "content": [
            {"type": "text", "text": "hi"},
            {"type": "image", "media_type": "image/png", "data": "iVBOR"},
        ],
        "is_error": True,
        "error": {"name": "ToolDeniedError", "code": "DENIED", "message": "no"},
        "additional_contexts": [
            {"text": "remember", "source": "policy"},
            {"text": "x", "source": None},
        ],
        "meta": {"rows": [1, 2], "big": 2**70, "z": -0.0},
        "concludes_turn": False,
        "halt": {"reason": "stop"},
        "synthetic": False,
    } == result.to_dict()
    assert result == ToolResult.from_dict(result.to_dict())


def test_synthetic_abort_round_trips() -> None:
    result = aborted(body_invoked=False, synthetic=True)
    back = ToolResult.from_dict(result.to_dict())
    assert result == back
    assert back.synthetic
    assert TOOL_ABORTED_BEFORE_DISPATCH == back.code


def test_a_result_with_meta_nested_to_the_limit_round_trips() -> None:
    """Meta nested as deep as the registry accepts (512 levels) has a wire form too."""
    meta: Any = 1
    for level in range(MAX_DEPTH):
        meta = [meta, level] if level % 2 else {"k": meta}
    result = ToolResult(content=(TextBlock("x"),), meta=freeze(meta))  # as the registry

    data = result.to_dict()

    assert_plain_json(data)
    assert result == ToolResult.from_dict(data)


def test_meta_comes_back_frozen() -> None:
    back = ToolResult.from_dict({"v": 1, "content": [], "meta": {"a": [1, {"b": []}]}})
    assert FrozenDict({"a": (1, FrozenDict({"b": ()}))}) == back.meta
    assert type(back.meta) is FrozenDict
    assert type(back.meta["a"]) is tuple  # type: ignore[index]


@given(json_values)
def test_a_result_built_with_plain_meta_round_trips(meta: object) -> None:
    """A result built by hand with plain (mutable) JSON meta round-trips too: its meta is
    frozen at construction, as the registry's results hold it, and stays hashable."""
    meta_before = copy.deepcopy(meta)
    result = ToolResult(content=[TextBlock("x")], meta=meta)

    assert result == ToolResult.from_dict(result.to_dict())
    assert freeze(meta) == result.meta
    assert meta_before == meta  # the caller's value is neither mutated nor frozen
    hash(result)


def test_plain_meta_with_arrays_round_trips() -> None:
    result = ToolResult(content=[TextBlock("rows")], meta={"rows": [1, 2], "big": 10**30})

    assert ToolResult.from_dict(result.to_dict()) == result
    assert FrozenDict({"rows": (1, 2), "big": 10**30}) == result.meta
    assert attrs.evolve(result, meta=[[]]).meta == ((),)


def test_meta_that_is_not_json_is_kept_for_the_registry_to_report() -> None:
    odd = {"when": {1, 2}}
    assert odd is ToolResult(content=[], meta=odd).meta


def test_optional_result_fields_take_their_defaults() -> None:
    assert ToolResult(content=[TextBlock("ok")]) == ToolResult.from_dict(
        {"v": 1, "content": [{"type": "text", "text": "ok"}]}
    )


def test_call_wire_form_is_the_documented_one() -> None:
    assert {"v": 1, "call_id": "c1", "name": "read", "arguments": '{"path": "a"}'} == ToolCall(
        "c1", "read", '{"path": "a"}'
    ).to_dict()
    assert {"v": 1, "call_id": "c1", "name": "read", "arguments": {"p": [1, 2]}} == ToolCall(
        "c1", "read", FrozenDict({"p": (1, 2)})
    ).to_dict()


def test_from_dict_does_not_mutate_its_input() -> None:
    data = ToolResult(content=[TextBlock("a")], meta=FrozenDict({"k": (1,)})).to_dict()
    before = copy.deepcopy(data)
    ToolResult.from_dict(data)
    assert before == data


# --------------------------------------------------------------------------------------
# Bad input


def good_result() -> dict[str, Any]:
    return ToolResult(
        content=[TextBlock("t"), ImageBlock("image/png", "AA")],
        is_error=True,
        error=ErrorInfo("E", "C", "m"),
        additional_contexts=[AdditionalContext("c")],
        halt=Halt("h"),
    ).to_dict()


def edit(data: dict[str, Any], path: tuple[Any, ...], value: object) -> dict[str, Any]:
    """A deep copy of ``data`` with ``path`` set to ``value`` (or deleted for ``...``)."""
    changed = copy.deepcopy(data)
    target: Any = changed
    for key in path[:-1]:
        target = target[key]
    if value is ...:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return changed


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("v",), ..., "v: missing"),
        (("v",), 2, "v: unsupported wire form version 2"),
        (("v",), True, "v: unsupported wire form version True"),
        (("v",), "1", "v: unsupported wire form version '1'"),
        (("content",), ..., "content: missing"),
        (("content",), "text", "content: expected an array"),
        (("content", 0), "t", "content[0]: expected an object"),
        (("content", 0, "type"), "video", "content[0].type: expected 'text' or 'image'"),
        (("content", 0, "text"), 3, "content[0].text: expected str, got 3"),
        (("content", 1, "media_type"), None, "content[1].media_type: expected str, got None"),
        (("content", 1, "data"), ..., "content[1].data: missing"),
        (("content", 1, "extra"), 1, "content[1].extra: unknown field"),
        (("is_error",), 1, "is_error: expected bool, got 1"),
        (("is_error",), False, "error: a result with error info must have is_error true"),
        (("error",), "E", "error: expected an object"),
        (("error", "code"), ..., "error.code: missing"),
        (("error", "message"), b"m", "error.message: expected str"),
        (("additional_contexts",), {}, "additional_contexts: expected an array"),
        (("additional_contexts", 0, "source"), 5, "additional_contexts[0].source: expected str"),
        (("additional_contexts", 0, "text"), ..., "additional_contexts[0].text: missing"),
        (("meta",), {"x": float("nan")}, "meta: not losslessly JSON"),
        (("meta",), {1, 2}, "meta: not losslessly JSON"),
        (("concludes_turn",), "yes", "concludes_turn: expected bool"),
        (("halt",), {"why": "x"}, "halt.why: unknown field"),
        (("halt", "reason"), None, "halt.reason: expected str"),
        (("synthetic",), 0, "synthetic: expected bool, got 0"),
        (("code",), "DENIED", "code: unknown field"),
    ],
)
def test_result_from_dict_names_the_bad_field(
    path: tuple[Any, ...], value: object, message: str
) -> None:
    with pytest.raises(ValueError, match=r"^ToolResult\.from_dict: ") as info:
        ToolResult.from_dict(edit(good_result(), path, value))
    assert message in str(info.value)


@pytest.mark.parametrize(
    "data", [None, [], "x", 1, {1: "v"}], ids=["none", "list", "str", "int", "int-key"]
)
def test_from_dict_of_a_non_object_is_a_value_error(data: object) -> None:
    with pytest.raises(ValueError, match=r"^ToolResult\.from_dict: the value: "):
        ToolResult.from_dict(data)
    with pytest.raises(ValueError, match=r"^ToolCall\.from_dict: the value: "):
        ToolCall.from_dict(data)


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("v",), ..., "v: missing"),
        (("v",), 0, "v: unsupported wire form version 0"),
        (("call_id",), ..., "call_id: missing"),
        (("call_id",), 7, "call_id: expected str, got 7"),
        (("name",), None, "name: expected str, got None"),
        (("arguments",), ..., "arguments: missing"),
        (("arguments",), {"a": float("inf")}, "arguments: not losslessly JSON"),
        (("id",), "c1", "id: unknown field"),
    ],
)
def test_call_from_dict_names_the_bad_field(
    path: tuple[Any, ...], value: object, message: str
) -> None:
    good = ToolCall("c1", "read", {"path": "a"}).to_dict()
    with pytest.raises(ValueError, match=r"^ToolCall\.from_dict: ") as info:
        ToolCall.from_dict(edit(good, path, value))
    assert message in str(info.value)


def test_to_dict_refuses_values_that_are_not_json() -> None:
    with pytest.raises(ValueError, match=r"ToolCall\.arguments is not losslessly JSON"):
        ToolCall("c1", "t", {"s": {1}}).to_dict()
    with pytest.raises(ValueError, match=r"ToolResult\.meta is not losslessly JSON"):
        ToolResult(content=[], meta=object()).to_dict()
