"""Lossless JSON snapshots (DESIGN.md §6): what ``freeze`` accepts and rejects, the frozen
form, and deep values through ``registry.execute``."""

from __future__ import annotations

import collections
import copy
import decimal
import enum
import fractions
import json
import math
from typing import Any

import pytest
from helpers_registry import TOOL, Harness, too_deep
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import json_values

from trio_tools import ToolOutput, ToolRunContext, define_tool
from trio_tools._json import (
    MAX_DEPTH,
    FrozenDict,
    NotJSONError,
    _thaw,
    _thaw_iteratively,
    freeze,
    thaw,
    to_compact_json,
)

DEEP = 100_000


class Color(enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    LOW = 1


class Name(enum.StrEnum):
    ALICE = "alice"


class MyDict(dict[str, Any]):
    pass


class MyList(list[Any]):
    pass


class MyStr(str):
    pass


class MyInt(int):
    pass


class MyFloat(float):
    pass


Point = collections.namedtuple("Point", ["x", "y"])


def nested_lists(depth: int) -> list[Any]:
    """``depth`` nested lists: ``[[...[]...]]`` (``[]`` has depth 1)."""
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


def nested_dicts(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"k": value}
    return value


# --------------------------------------------------------------------------------------
# Accepted values


@pytest.mark.parametrize(
    "value",
    [None, True, False, 0, -7, 2**64, -(10**100), 1.5, -0.0, 1e308, 5e-324, "", "é\u2028\x00"],
    ids=repr,
)
def test_scalars_are_accepted_as_they_are(value: object) -> None:
    frozen = freeze(value)

    assert frozen is value


def test_negative_zero_keeps_its_sign() -> None:
    frozen = freeze({"z": -0.0, "list": [-0.0]})

    assert -1.0 == math.copysign(1.0, frozen["z"])
    assert -1.0 == math.copysign(1.0, frozen["list"][0])
    assert '{"z":-0.0,"list":[-0.0]}' == to_compact_json(frozen)


def test_big_ints_survive_exactly() -> None:
    big = 2**200 + 1

    assert [big] == list(freeze([big]))
    assert f"[{big}]" == to_compact_json(freeze([big]))


def test_containers_freeze_to_tuples_and_frozen_dicts() -> None:
    value = {"a": [1, (2, 3), {"b": []}], "c": {}, "d": ()}

    frozen = freeze(value)

    assert {"a": (1, (2, 3), {"b": ()}), "c": {}, "d": ()} == frozen
    assert type(frozen) is FrozenDict
    assert type(frozen["a"]) is tuple
    assert type(frozen["a"][1]) is tuple
    assert type(frozen["a"][2]) is FrozenDict
    assert type(frozen["a"][2]["b"]) is tuple
    assert type(frozen["c"]) is FrozenDict
    assert type(frozen["d"]) is tuple


@pytest.mark.parametrize("value", [[], (), {}, [1, "a", None], ("x",), {"k": 1.5}], ids=repr)
def test_any_accepted_value_may_be_the_top_level(value: object) -> None:
    frozen = freeze(value)

    assert thaw(value) == thaw(frozen)


def test_key_order_is_kept() -> None:
    frozen = freeze({"b": 1, "a": 2, "c": {"z": 1, "y": 2}})

    assert ["b", "a", "c"] == list(frozen)
    assert '{"b":1,"a":2,"c":{"z":1,"y":2}}' == to_compact_json(frozen)


def test_shared_references_are_not_cycles() -> None:
    shared = [1, {"x": 2}]
    shared_dict = {"k": shared}

    frozen = freeze({"first": shared, "second": shared, "again": [shared_dict, shared_dict]})

    expected_shared = (1, {"x": 2})
    assert {
        "first": expected_shared,
        "second": expected_shared,
        "again": ({"k": expected_shared}, {"k": expected_shared}),
    } == frozen


# --------------------------------------------------------------------------------------
# Rejected values


def _cycle_list() -> object:
    value: list[Any] = [1]
    value.append(value)
    return value


def _cycle_dict() -> object:
    value: dict[str, Any] = {}
    value["self"] = {"inner": [value]}
    return value


@pytest.mark.parametrize(
    "value",
    [
        {1, 2},
        frozenset(),
        b"bytes",
        bytearray(b"x"),
        math.nan,
        math.inf,
        -math.inf,
        Color.RED,
        Level.LOW,
        Name.ALICE,
        MyDict(a=1),
        MyList([1]),
        MyStr("s"),
        MyInt(1),
        MyFloat(1.0),
        Point(1, 2),
        object(),
        decimal.Decimal("1.5"),
        fractions.Fraction(1, 2),
        1j,
        {1: "int key"},
        {None: "none key"},
        {("a",): "tuple key"},
        {True: "bool key"},
        {Name.ALICE: "str enum key"},
        {MyStr("k"): "str subclass key"},
        iter([1]),
        range(3),
        collections.OrderedDict(a=1),
    ],
    ids=repr,
)
@pytest.mark.parametrize("where", ["top", "in-list", "in-dict", "deep"])
def test_non_json_values_are_rejected_anywhere(value: object, where: str) -> None:
    wrapped = {
        "top": value,
        "in-list": [1, value],
        "in-dict": {"a": 1, "b": value},
        "deep": {"a": [{"b": [value]}]},
    }[where]

    with pytest.raises(NotJSONError):
        freeze(wrapped)


@pytest.mark.parametrize("make", [_cycle_list, _cycle_dict], ids=["list", "dict"])
def test_cycles_are_rejected(make: Any) -> None:
    with pytest.raises(NotJSONError, match="cycle"):
        freeze(make())


def test_not_json_error_is_a_type_error() -> None:
    assert issubclass(NotJSONError, TypeError)


# --------------------------------------------------------------------------------------
# The frozen form


def test_frozen_objects_refuse_every_mutation() -> None:
    frozen = freeze({"a": 1, "b": {"c": [1]}})
    mutations = [
        lambda: frozen.__setitem__("a", 2),
        lambda: frozen.__delitem__("a"),
        lambda: frozen.clear(),
        lambda: frozen.pop("a"),
        lambda: frozen.popitem(),
        lambda: frozen.setdefault("z", 1),
        lambda: frozen.update(z=1),
        lambda: frozen.__ior__({"z": 1}),
        lambda: frozen["b"].__setitem__("c", ()),
    ]

    for mutate in mutations:
        with pytest.raises(TypeError):
            mutate()

    assert {"a": 1, "b": {"c": (1,)}} == frozen


def test_frozen_values_are_hashable_and_compare_as_json() -> None:
    first = freeze({"a": [1, {"b": None}], "c": "d"})
    second = freeze({"c": "d", "a": [1, {"b": None}]})

    assert first == second
    assert hash(first) == hash(second)
    assert {first: "usable as a key"}[second] == "usable as a key"
    assert {"a": (1, {"b": None}), "c": "d"} == first
    assert first != freeze({"a": [1, {"b": 0}], "c": "d"})


def test_copies_of_a_frozen_object_are_itself() -> None:
    frozen = freeze({"a": [1]})

    assert copy.copy(frozen) is frozen
    assert copy.deepcopy(frozen) is frozen


def test_freezing_a_frozen_value_accepts_it_as_is() -> None:
    frozen = freeze({"a": [1, {"b": 2}]})

    assert freeze(frozen) is frozen
    assert freeze([frozen])[0] is frozen
    assert freeze({"outer": frozen})["outer"] is frozen
    assert frozen == freeze(freeze(frozen))
    assert freeze(frozen["a"]) == frozen["a"]


def test_the_callers_object_is_never_mutated_or_frozen() -> None:
    inner = [1, 2]
    value = {"list": inner, "dict": {"x": inner}, "tuple": (inner,)}
    before = copy.deepcopy(value)

    frozen = freeze(value)

    assert before == value
    assert type(value) is dict
    assert value["list"] is inner
    assert value["dict"]["x"] is inner
    assert type(value["dict"]) is dict
    inner.append(3)
    value["new"] = 1
    assert {"list": (1, 2), "dict": {"x": (1, 2)}, "tuple": ((1, 2),)} == frozen


def test_to_compact_json_uses_compact_separators_and_rejects_nan() -> None:
    assert '{"a":[1,2.5,null,true,"x"],"b":{}}' == to_compact_json(
        freeze({"a": [1, 2.5, None, True, "x"], "b": {}})
    )
    with pytest.raises(ValueError, match="JSON"):
        to_compact_json(math.nan)


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_freeze_round_trips_json_values(value: object) -> None:
    frozen = freeze(value)

    assert value == thaw(frozen)
    assert json.dumps(value, separators=(",", ":")) == to_compact_json(frozen)
    assert frozen == freeze(frozen)
    assert frozen == freeze(copy.deepcopy(value))
    hash(frozen)


@settings(max_examples=100, deadline=None)
@given(json_values, st.sampled_from([{1}, math.nan, b"x", Color.RED, MyList()]))
def test_one_bad_leaf_anywhere_rejects_the_whole_value(value: object, bad: object) -> None:
    with pytest.raises(NotJSONError):
        freeze([value, {"bad": bad}])


# --------------------------------------------------------------------------------------
# Depth: an explicit limit instead of a RecursionError


def test_max_depth_is_512() -> None:
    assert 512 == MAX_DEPTH


def test_nesting_up_to_max_depth_is_accepted() -> None:
    expected: tuple[Any, ...] = ()
    for _ in range(MAX_DEPTH - 1):
        expected = (expected,)

    frozen_lists = freeze(nested_lists(MAX_DEPTH))
    frozen_dicts = freeze(nested_dicts(MAX_DEPTH))

    assert expected == frozen_lists
    assert nested_dicts(MAX_DEPTH) == frozen_dicts
    hash(frozen_lists)
    hash(frozen_dicts)


@pytest.mark.parametrize("nested", [nested_lists, nested_dicts], ids=["lists", "dicts"])
def test_every_accepted_depth_thaws_and_encodes(nested: Any) -> None:
    """What freeze accepts, thaw and the encoder take back, down to the limit."""
    value = nested(MAX_DEPTH)
    frozen = freeze(value)

    assert value == thaw(frozen)
    assert json.dumps(value, separators=(",", ":")) == to_compact_json(frozen)


@settings(max_examples=100, deadline=None)
@given(json_values)
def test_thawing_without_recursion_gives_the_same_copy(value: object) -> None:
    frozen = freeze(value)

    assert _thaw(frozen) == _thaw_iteratively(frozen)


def test_thaw_refuses_a_cycle_with_recursion_error() -> None:
    cyclic: list[object] = []
    cyclic.append(cyclic)

    with pytest.raises(RecursionError):
        thaw(cyclic)


@pytest.mark.parametrize("nested", [nested_lists, nested_dicts], ids=["lists", "dicts"])
@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, DEEP])
def test_deeper_nesting_is_rejected_without_recursion_error(nested: Any, depth: int) -> None:
    value = nested(depth)

    with pytest.raises(NotJSONError, match="deeper"):
        freeze(value)


def around(value: object, levels: int, *, lists: bool) -> object:
    """``value`` inside ``levels`` more lists (or objects)."""
    for _ in range(levels):
        value = [value] if lists else {"a": value}
    return value


@pytest.mark.parametrize("lists", [True, False], ids=["in lists", "in objects"])
@pytest.mark.parametrize("inner", [1, 2, MAX_DEPTH - 1, MAX_DEPTH])
def test_a_frozen_object_taken_as_it_is_still_counts_its_depth(lists: bool, inner: int) -> None:
    """No value put together from frozen pieces nests deeper than the limit: a deeper one
    could not be compared, hashed or encoded."""
    piece = freeze(nested_dicts(inner))
    levels = MAX_DEPTH - inner  # the most levels around it that stay within the limit

    frozen = freeze(around(piece, levels, lists=lists))

    hash(frozen)
    assert around(nested_dicts(inner), levels, lists=lists) == thaw(frozen)
    with pytest.raises(NotJSONError, match="deeper"):
        freeze(around(piece, levels + 1, lists=lists))
    with pytest.raises(NotJSONError, match="deeper"):
        freeze(around(frozen, 1, lists=lists))


async def test_frozen_pieces_deeper_together_are_not_json_through_execute() -> None:
    """Arguments and results built around frozen values (a tool's own arguments, say) are
    held to the limit like any other."""
    h = Harness()
    piece = freeze(nested_dicts(MAX_DEPTH))

    async def body(args: object, ctx: ToolRunContext) -> object:
        return [args]

    h.registry.register(define_tool(body, name=TOOL))

    assert too_deep("execution arguments") == await h.execute(arguments=[piece])
    assert too_deep("result") == await h.execute(arguments=piece)


async def test_deep_arguments_are_not_json_through_execute() -> None:
    h = Harness()
    calls: list[str] = []

    async def body(args: object, ctx: ToolRunContext) -> str:
        calls.append("body")
        return "done"

    h.registry.register(define_tool(body, name=TOOL))

    assert too_deep("execution arguments") == await h.execute(arguments=nested_lists(DEEP))
    assert too_deep("execution arguments") == await h.execute(arguments={"a": nested_dicts(DEEP)})
    assert [] == calls


@pytest.mark.parametrize("as_meta", [False, True], ids=["content", "meta"])
async def test_a_deep_result_is_not_json_through_execute(as_meta: bool) -> None:
    h = Harness()

    async def body(args: object, ctx: ToolRunContext) -> object:
        deep = nested_lists(DEEP)
        return ToolOutput(content="x", meta=deep) if as_meta else deep

    h.registry.register(define_tool(body, name=TOOL))

    assert too_deep("result") == await h.execute()


async def test_a_result_int_beyond_the_str_digit_limit_is_still_json_text() -> None:
    h = Harness()

    async def body(args: object, ctx: ToolRunContext) -> object:
        return [10**5000]

    h.registry.register(define_tool(body, name=TOOL))

    result = await h.execute()

    assert not result.is_error
