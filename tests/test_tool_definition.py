"""Tool definitions and argument validation (DESIGN.md §3): ``define_tool`` defaults, the
generated JSON Schema, policy knobs, the supported argument types and ``INVALID_ARGS``."""

from __future__ import annotations

import dataclasses
import functools
import math
import typing
from typing import Any, TypedDict

import attrs
import msgspec
import pytest
from helpers_registry import TOOL, Harness, error

from trio_tools import ToolDefinition, ToolRegistry, ToolRunContext, define_tool


@attrs.frozen
class ReadArgs:
    path: str
    max_bytes: int = 65536


@attrs.frozen
class Item:
    name: str
    count: int = 0


@attrs.frozen
class Order:
    customer: str
    items: list[Item]
    note: Item | None = None
    tags: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class DataArgs:
    a: int
    b: list[str] = dataclasses.field(default_factory=list)


class DictArgs(typing.TypedDict):
    a: int
    b: str


class StructArgs(msgspec.Struct, frozen=True):
    a: int
    b: str = "x"


async def read_file(args: ReadArgs, ctx: ToolRunContext) -> str:
    """Read a UTF-8 text file.

    Returns at most ``max_bytes``.
    """
    return f"{args.path}:{args.max_bytes}"


async def raw(args, ctx):
    return "raw"


async def raw_object(args: object, ctx: ToolRunContext) -> str:
    return "raw"


async def raw_any(args: Any, ctx: ToolRunContext) -> str:
    return "raw"


# --------------------------------------------------------------------------------------
# define_tool and ToolDefinition


def test_define_tool_takes_name_description_and_argument_type_from_the_function() -> None:
    definition = define_tool(read_file)

    assert (
        ToolDefinition(
            name="read_file",
            description="Read a UTF-8 text file.\n\nReturns at most ``max_bytes``.",
            execute=read_file,
            args=ReadArgs,
        )
        == definition
    )
    assert {
        "title": "ReadArgs",
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "max_bytes": {"type": "integer", "default": 65536},
        },
        "required": ("path",),
    } == definition.parameters
    assert (None, False, None) == (
        definition.timeout,
        definition.concurrency_safe,
        definition.finalize_content,
    )


def test_define_tool_as_a_decorator_with_options() -> None:
    def finalize(execution: object, result: object) -> None:
        return None

    @define_tool(
        name="read",
        description="Reads.",
        timeout=5,
        concurrency_safe=True,
        finalize_content=finalize,
    )
    async def body(args: ReadArgs, ctx: ToolRunContext) -> str:
        """Ignored docstring."""
        return ""

    assert ("read", "Reads.", ReadArgs, 5, True, finalize) == (
        body.name,
        body.description,
        body.args,
        body.timeout,
        body.concurrency_safe,
        body.finalize_content,
    )


def test_explicit_args_override_the_annotation() -> None:
    definition = define_tool(raw_object, args=Item)

    assert Item is definition.args
    assert ("name",) == definition.parameters["required"]


@pytest.mark.parametrize("body", [raw, raw_object, raw_any])
def test_without_an_argument_type_the_tool_is_raw(body: Any) -> None:
    definition = define_tool(body, name="raw")

    assert definition.args is None
    assert {"type": "object"} == definition.parameters
    assert "" == definition.description


def test_a_body_without_parameters_is_a_signature_tool_without_arguments() -> None:
    async def nothing() -> str:
        return ""

    definition = define_tool(nothing)

    assert {"type": "object", "properties": {}, "required": ()} == definition.parameters


def test_an_explicit_argument_type_needs_a_body_taking_args_and_ctx() -> None:
    async def nothing() -> str:
        return ""

    with pytest.raises(TypeError, match=r"tool 'nothing'.*must take \(args, ctx\)"):
        define_tool(nothing, args=ReadArgs)


@pytest.mark.parametrize("timeout", [1, 0.5, 3600, None])
def test_valid_timeouts(timeout: float | None) -> None:
    assert timeout == define_tool(raw_object, timeout=timeout).timeout


@pytest.mark.parametrize(
    "timeout", [0, -1, 0.0, True, False, math.inf, math.nan, -math.inf, "5", [5], 10**400]
)
def test_invalid_timeouts_raise_value_error_at_definition(timeout: Any) -> None:
    with pytest.raises(ValueError, match="timeout"):
        define_tool(raw_object, timeout=timeout)
    with pytest.raises(ValueError, match="timeout"):
        ToolDefinition(name="t", execute=raw_object, timeout=timeout)


@pytest.mark.parametrize("name", ["", None, 3])
def test_a_tool_needs_a_non_empty_str_name(name: Any) -> None:
    with pytest.raises(ValueError, match="name"):
        ToolDefinition(name=name, execute=raw_object)


@pytest.mark.parametrize("flag", [None, 1, "yes"])
def test_concurrency_safe_must_be_a_bool_or_a_callable(flag: Any) -> None:
    with pytest.raises(TypeError, match="concurrency_safe"):
        define_tool(raw_object, concurrency_safe=flag)


def test_tool_definition_with_a_hand_written_schema_is_frozen() -> None:
    schema = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}

    definition = ToolDefinition(name="search", execute=raw_object, parameters=schema)

    assert {
        "type": "object",
        "properties": {"q": {"type": "string"}},
        "required": ("q",),
    } == definition.parameters
    with pytest.raises(TypeError):
        definition.parameters["type"] = "array"
    schema["type"] = "changed"
    assert "object" == definition.parameters["type"]
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        definition.name = "other"


@pytest.mark.parametrize("schema", [{"type": {"object"}}, {1: "x"}, {"x": math.nan}])
def test_a_hand_written_schema_must_be_json(schema: Any) -> None:
    with pytest.raises(TypeError, match="parameters"):
        ToolDefinition(name="t", execute=raw_object, parameters=schema)


def test_argument_types_without_a_schema_are_rejected() -> None:
    class Opaque:
        pass

    with pytest.raises(TypeError, match="JSON Schema"):
        define_tool(raw_object, args=Opaque)


def test_nested_argument_types_share_defs_in_the_schema() -> None:
    definition = define_tool(raw_object, args=Order)

    assert {
        "title": "Order",
        "type": "object",
        "properties": {
            "customer": {"type": "string"},
            "items": {"type": "array", "items": {"$ref": "#/$defs/Item"}},
            "note": {"anyOf": ({"$ref": "#/$defs/Item"}, {"type": "null"}), "default": None},
            "tags": {"type": "array", "items": {"type": "string"}, "default": ()},
        },
        "required": ("customer", "items"),
        "$defs": {
            "Item": {
                "title": "Item",
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "count": {"type": "integer", "default": 0},
                },
                "required": ("name",),
            }
        },
    } == definition.parameters


@pytest.mark.parametrize(
    ("args", "schema"),
    [
        (
            DataArgs,
            {
                "title": "DataArgs",
                "type": "object",
                "properties": {
                    "a": {"type": "integer"},
                    "b": {"type": "array", "items": {"type": "string"}, "default": ()},
                },
                "required": ("a",),
            },
        ),
        (
            DictArgs,
            {
                "title": "DictArgs",
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
                "required": ("a", "b"),
            },
        ),
        (
            StructArgs,
            {
                "title": "StructArgs",
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "string", "default": "x"}},
                "required": ("a",),
            },
        ),
    ],
    ids=["dataclass", "typeddict", "struct"],
)
def test_msgspec_argument_types_generate_schemas(args: type, schema: dict[str, Any]) -> None:
    assert schema == define_tool(raw_object, args=args).parameters


# --------------------------------------------------------------------------------------
# Arguments at run time


def _register_typed(h: Harness, args: type) -> list[object]:
    received: list[object] = []

    async def body(parsed: Any, ctx: ToolRunContext) -> str:
        received.append(parsed)
        return "ok"

    h.registry.register(define_tool(body, name=TOOL, args=args))
    return received


def invalid(*violations: str) -> Any:
    return error("ToolArgsError", "INVALID_ARGS", "invalid arguments: " + "; ".join(violations))


async def test_the_body_receives_parsed_attrs_arguments_and_extra_fields_are_ignored() -> None:
    h = Harness()
    received = _register_typed(h, ReadArgs)

    result = await h.execute(arguments={"path": "a.txt", "unknown": [1, 2], "also": None})

    assert "ok" == result.content[0].text
    assert [ReadArgs(path="a.txt")] == received


@pytest.mark.parametrize(
    ("args", "arguments", "expected"),
    [
        (DataArgs, {"a": 1, "b": ["x"]}, DataArgs(1, ["x"])),
        (DictArgs, {"a": 1, "b": "x", "extra": 0}, {"a": 1, "b": "x"}),
        (StructArgs, {"a": 2}, StructArgs(2)),
        (
            Order,
            {"customer": "c", "items": [{"name": "n"}], "tags": ["t"]},
            Order("c", [Item("n")], tags=("t",)),
        ),
    ],
    ids=["dataclass", "typeddict", "struct", "nested-attrs"],
)
async def test_supported_argument_types_are_parsed(
    args: type, arguments: object, expected: object
) -> None:
    h = Harness()
    received = _register_typed(h, args)

    await h.execute(arguments=arguments)

    assert [expected] == received


async def test_invalid_arguments_list_every_violation_with_its_path() -> None:
    h = Harness()
    received = _register_typed(h, ReadArgs)

    result = await h.execute(arguments={"max_bytes": "big"})

    assert invalid("$.path: missing required field", "$.max_bytes: expected int, got str") == result
    assert [] == received


async def test_nested_violations_have_nested_paths() -> None:
    h = Harness()
    _register_typed(h, Order)

    result = await h.execute(
        arguments={
            "items": [{"name": "ok"}, {"count": "3"}, {"name": 7, "count": 1}],
            "note": {"count": 1.5},
            "tags": ["a", 2],
        }
    )

    expected = invalid(
        "$.customer: missing required field",
        "$.items[1].name: missing required field",
        "$.items[1].count: expected int, got str",
        "$.items[2].name: expected str, got int",
        "$.note.name: missing required field",
        "$.note.count: expected int, got float",
        "$.tags[1]: expected str, got int",
    )
    assert expected == result


@pytest.mark.parametrize(
    ("arguments", "violation"),
    [
        ([1, 2], "$: expected object, got array"),
        ("path", "$: expected object, got str"),
        (None, "$: expected object, got null"),
        ({"path": "p", "max_bytes": True}, "$.max_bytes: expected int, got bool"),
    ],
)
async def test_arguments_of_the_wrong_shape_are_invalid(arguments: object, violation: str) -> None:
    h = Harness()
    _register_typed(h, ReadArgs)

    call = h.input(arguments=arguments)
    if arguments is None:
        call = attrs.evolve(call, arguments=None)
    result = await h.registry.execute(call)

    assert invalid(violation) == result


@pytest.mark.parametrize(
    ("args", "arguments", "violations"),
    [
        (DataArgs, {"b": [1]}, ["$.a: missing required field", "$.b[0]: expected str, got int"]),
        (DictArgs, {"a": "1"}, ["$.a: expected int, got str", "$.b: missing required field"]),
        (
            StructArgs,
            {"a": None, "b": 1},
            ["$.a: expected int, got null", "$.b: expected str, got int"],
        ),
    ],
    ids=["dataclass", "typeddict", "struct"],
)
async def test_msgspec_argument_types_list_every_violation(
    args: type, arguments: object, violations: list[str]
) -> None:
    h = Harness()
    _register_typed(h, args)

    assert invalid(*violations) == await h.execute(arguments=arguments)


@pytest.mark.parametrize(
    ("arguments", "frozen"),
    [
        ({"a": [1, {"b": []}]}, {"a": (1, {"b": ()})}),
        ([1, [2]], (1, (2,))),
        ("text", "text"),
        (3, 3),
        ({}, {}),
    ],
)
async def test_raw_tools_receive_the_frozen_snapshot(arguments: object, frozen: object) -> None:
    h = Harness()
    received: list[object] = []

    async def body(args: object, ctx: ToolRunContext) -> str:
        received.append(args)
        return "ok"

    h.registry.register(define_tool(body, name=TOOL))

    await h.execute(arguments=arguments)

    assert [frozen] == received
    hash(received[0])


async def test_the_raw_snapshot_is_immutable() -> None:
    h = Harness()
    received: list[Any] = []

    async def body(args: Any, ctx: ToolRunContext) -> str:
        received.append(args)
        return "ok"

    h.registry.register(define_tool(body, name=TOOL))
    await h.execute(arguments={"list": [1], "object": {"k": "v"}})

    (snapshot,) = received
    assert type(snapshot["list"]) is tuple
    for mutate in [
        lambda: snapshot.__setitem__("new", 1),
        lambda: snapshot.__delitem__("list"),
        lambda: snapshot.update({"x": 1}),
        lambda: snapshot.pop("list"),
        lambda: snapshot.popitem(),
        lambda: snapshot.setdefault("x", 1),
        lambda: snapshot.clear(),
        lambda: snapshot["object"].__setitem__("k", "w"),
    ]:
        with pytest.raises(TypeError):
            mutate()
    assert {"list": (1,), "object": {"k": "v"}} == snapshot


def test_registry_tool_uses_the_same_definition_rules() -> None:
    registry = ToolRegistry()

    definition = registry.tool(read_file, timeout=1.5)

    assert registry.get("read_file") is definition
    assert ReadArgs is definition.args
    assert "Read a UTF-8 text file.\n\nReturns at most ``max_bytes``." == definition.description
    with pytest.raises(ValueError, match="timeout"):
        registry.tool(raw_object, name="other", timeout=0)
    assert registry.get("other") is None


class _PartialArgs(TypedDict):
    path: str


async def _partial_body(args: _PartialArgs, ctx: ToolRunContext, prefix: str) -> str:
    return prefix + args["path"]


def test_a_partial_body_needs_a_name_and_keeps_its_argument_type() -> None:
    body = functools.partial(_partial_body, prefix="read ")
    with pytest.raises(ValueError, match="needs name="):
        define_tool(body)
    definition = define_tool(body, name="read")
    assert ("read", _PartialArgs) == (definition.name, definition.args)


# --------------------------------------------------------------------------------------
# Issue 11, item 2: an argument class whose constructor raises is INVALID_ARGS at `$`


@attrs.frozen
class PostInitKeyError:
    a: int

    def __attrs_post_init__(self) -> None:
        raise KeyError("no such key")


def _raise_key_error(instance: object, attribute: object, value: object) -> None:
    raise KeyError("validator lookup")


@attrs.frozen
class ValidatorKeyError:
    a: int = attrs.field(validator=_raise_key_error)


@dataclasses.dataclass(frozen=True)
class PostInitRuntimeError:
    a: int

    def __post_init__(self) -> None:
        raise RuntimeError("refused by __post_init__")


@dataclasses.dataclass(frozen=True)
class PostInitValueError:
    a: int

    def __post_init__(self) -> None:
        raise ValueError("a must be even")


@pytest.mark.parametrize(
    ("args", "violation"),
    [
        (PostInitKeyError, "$: 'no such key'"),
        (ValidatorKeyError, "$: 'validator lookup'"),
        (PostInitRuntimeError, "$: refused by __post_init__"),
        (PostInitValueError, "$: a must be even"),
    ],
    ids=["attrs-post-init", "attrs-validator", "dataclass-runtime-error", "value-error"],
)
async def test_a_raising_argument_constructor_is_invalid_args_at_the_root(
    args: type, violation: str
) -> None:
    h = Harness()
    received = _register_typed(h, args)

    result = await h.execute(arguments={"a": 1})

    assert invalid(violation) == result
    assert [] == received


@attrs.frozen
class HoldsRaising:
    inner: PostInitRuntimeError
    b: int


async def test_a_raising_nested_constructor_is_reported_with_the_other_violations() -> None:
    h = Harness()
    _register_typed(h, HoldsRaising)

    result = await h.execute(arguments={"inner": {"a": 1}, "b": "x"})

    assert invalid("$.inner: refused by __post_init__", "$.b: expected int, got str") == result


def test_execution_mode_of_a_raising_argument_class_is_exclusive_not_an_exception() -> None:
    registry = ToolRegistry()
    registry.register(
        define_tool(raw_object, name=TOOL, args=PostInitKeyError, concurrency_safe=lambda a: True)
    )

    assert "exclusive" == registry.execution_mode(Harness().input(arguments={"a": 1}))


# --------------------------------------------------------------------------------------
# Issue 11, item 8: every violation inside dicts, fixed tuples and sets, with a real path


@attrs.frozen
class Containers:
    scores: dict[str, int]
    pair: tuple[int, str]
    tags: set[int]
    people: dict[str, Item]
    frozen: frozenset[str] = frozenset()


async def test_violations_inside_dicts_tuples_and_sets_have_real_json_paths() -> None:
    h = Harness()
    _register_typed(h, Containers)

    result = await h.execute(
        arguments={
            "scores": {"alice": "ten", "bob": 2, "carol": None, "d e": 1.5},
            "pair": [1, 2],
            "tags": [1, "two", 3, None],
            "people": {"ann": {"name": "Ann"}, "ben": {"count": 1}, "cy": {"name": 3}},
            "frozen": ["a", 1],
        }
    )

    assert (
        invalid(
            "$.scores.alice: expected int, got str",
            "$.scores.carol: expected int, got null",
            '$.scores["d e"]: expected int, got float',
            "$.pair[1]: expected str, got int",
            "$.tags[1]: expected int, got str",
            "$.tags[3]: expected int, got null",
            "$.people.ben.name: missing required field",
            "$.people.cy.name: expected str, got int",
            "$.frozen[1]: expected str, got int",
        )
        == result
    )


async def test_a_fixed_tuple_of_the_wrong_length_says_so_at_its_path() -> None:
    h = Harness()
    _register_typed(h, Containers)

    result = await h.execute(
        arguments={"scores": {}, "pair": [1], "tags": [], "people": {}, "frozen": []}
    )

    assert invalid("$.pair: expected array of length 2, got 1") == result


async def test_a_signature_tools_dict_values_have_real_json_paths() -> None:
    h = Harness()

    @h.registry.tool(name=TOOL)
    async def body(scores: dict[str, int], pair: tuple[int, str] = (0, "")) -> str:
        return "ok"

    result = await h.execute(arguments={"scores": {"alice": "x"}, "pair": ["a", "b"]})

    assert invalid("$.scores.alice: expected int, got str", "$.pair[0]: expected int, got str") == (
        result
    )


async def test_a_generic_alias_argument_type_still_works() -> None:
    h = Harness()
    received = _register_typed(h, dict[str, int])

    assert "ok" == (await h.execute(arguments={"a": 1})).text
    assert invalid("$.b: expected int, got str") == await h.execute(arguments={"b": "x"})
    assert [{"a": 1}] == received
