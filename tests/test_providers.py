"""trio_tools.providers: the converters, checked against the SDKs' own types.

Every output is validated with ``conforms`` (a pydantic ``TypeAdapter`` over the SDK's
param ``TypedDict``) and checked to be plain, mutable JSON; the negative controls show the
check rejects what the APIs reject.  Streams are recorded event sequences, replayed with a
call's arguments split at every character boundary.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterable
from typing import Any

import anthropic.types as anthropic_types
import attrs
import openai.types.chat as chat_types
import openai.types.responses as responses_types
import pydantic
import pytest
import trio
from helpers_providers import (
    PNG_B64,
    Gates,
    TagArgs,
    assert_plain_json,
    build_registry,
    conforms,
    fake,
    mixed_outcome,
    splits,
)

import trio_tools
from trio_tools import INVALID_ARGS, BatchOutcome, ToolCall, ToolDefinition, ToolRegistry
from trio_tools.providers import anthropic, openai_chat, openai_responses

APIS = [openai_chat, openai_responses, anthropic]
API_IDS = ["openai_chat", "openai_responses", "anthropic"]

SPEC_TYPE = {
    openai_chat: chat_types.ChatCompletionToolUnionParam,
    openai_responses: responses_types.ToolParam,
    anthropic: anthropic_types.ToolUnionParam,
}
RESULT_TYPE = {
    openai_chat: chat_types.ChatCompletionMessageParam,
    openai_responses: responses_types.ResponseInputItemParam,
    anthropic: anthropic_types.MessageParam,
}


def strict_registry() -> ToolRegistry:
    """Only tools whose schemas have a strict form."""
    full = build_registry()
    registry = ToolRegistry()
    for name in ("get_weather", "write_file", "plan_route"):
        definition = full.get(name)
        assert definition is not None
        registry.register(definition)
    return registry


# -- tool_specs ---------------------------------------------------------------------------

WEATHER_PARAMETERS = {
    "title": "WeatherArgs",
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "unit": {"enum": ["celsius", "fahrenheit"], "default": "celsius"},
    },
    "required": ["city"],
}


def test_chat_tool_specs_are_function_tools() -> None:
    specs = openai_chat.tool_specs(build_registry())

    assert {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather in a city.",
            "parameters": WEATHER_PARAMETERS,
        },
    } == specs[0]
    assert [
        "get_weather",
        "screenshot",
        "read_file",
        "slow_search",
        "write_file",
        "plan_route",
    ] == [spec["function"]["name"] for spec in specs]


def test_responses_tool_specs_always_say_strict() -> None:
    specs = openai_responses.tool_specs(build_registry())

    assert {
        "type": "function",
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": WEATHER_PARAMETERS,
        "strict": False,  # the API's own default is strict: never leave it out
    } == specs[0]


def test_anthropic_tool_specs_have_an_input_schema() -> None:
    specs = anthropic.tool_specs(build_registry())

    assert {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "input_schema": WEATHER_PARAMETERS,
    } == specs[0]


@pytest.mark.parametrize("api", APIS, ids=API_IDS)
@pytest.mark.parametrize("strict", [False, True])
def test_tool_specs_match_the_sdk_types_and_are_plain_json(api: Any, strict: bool) -> None:
    registry = strict_registry() if strict else build_registry()
    specs = api.tool_specs(registry, strict=strict)

    assert len(registry.schemas()) == len(specs)
    assert_plain_json(specs)
    for spec in specs:
        conforms(SPEC_TYPE[api], spec)


@pytest.mark.parametrize("api", APIS, ids=API_IDS)
def test_tool_specs_are_thawed_copies(api: Any) -> None:
    """Mutating a spec changes nothing in the registry, nor in the next specs."""
    registry = build_registry()
    first = api.tool_specs(registry)
    json_text = json.dumps(first)
    for spec in first:
        schema = spec.get("function", spec)
        schema = schema.get("parameters", schema.get("input_schema"))
        schema["properties"] = {"changed": True}

    assert json_text == json.dumps(api.tool_specs(registry))


def test_a_tool_without_description_has_no_description_key() -> None:
    registry = ToolRegistry()

    async def bare(args: object, ctx: trio_tools.ToolRunContext) -> str:
        return ""

    registry.register(ToolDefinition(name="bare", execute=bare, description=""))

    assert [
        {"type": "function", "function": {"name": "bare", "parameters": {"type": "object"}}}
    ] == (openai_chat.tool_specs(registry))
    assert [{"name": "bare", "input_schema": {"type": "object"}}] == anthropic.tool_specs(registry)


# -- strict mode ----------------------------------------------------------------------------

STRICT_POINT = {
    "title": "Point",
    "type": "object",
    "properties": {
        "lat": {"type": "number"},
        "lon": {"type": "number"},
        "label": {"anyOf": [{"type": "string"}, {"type": "null"}]},
    },
    "required": ["lat", "lon", "label"],
    "additionalProperties": False,
}

STRICT_ROUTE = {
    "title": "RouteArgs",
    "type": "object",
    "properties": {
        "start": {"$ref": "#/$defs/Point"},
        "end": {"$ref": "#/$defs/Point"},
        "via": {"type": ["array", "null"], "items": {"$ref": "#/$defs/Point"}},
        "mode": {"enum": ["drive", "walk", None]},
        "max_km": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
    },
    "required": ["start", "end", "via", "mode", "max_km"],
    "additionalProperties": False,
    "$defs": {"Point": STRICT_POINT},
}


def test_strict_rewrites_every_object_schema_including_defs() -> None:
    specs = openai_chat.tool_specs(strict_registry(), strict=True)
    route = specs[2]["function"]

    assert True is route["strict"]
    assert STRICT_ROUTE == route["parameters"]
    assert {
        "title": "WeatherArgs",
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "unit": {"enum": ["celsius", "fahrenheit", None]},
        },
        "required": ["city", "unit"],
        "additionalProperties": False,
    } == specs[0]["function"]["parameters"]


def test_strict_is_the_same_rewrite_for_every_api() -> None:
    registry = strict_registry()
    chat = [
        spec["function"]["parameters"] for spec in openai_chat.tool_specs(registry, strict=True)
    ]
    responses = [spec["parameters"] for spec in openai_responses.tool_specs(registry, strict=True)]
    claude = [spec["input_schema"] for spec in anthropic.tool_specs(registry, strict=True)]

    assert chat == responses == claude
    assert all(spec["strict"] is True for spec in anthropic.tool_specs(registry, strict=True))


def test_strict_nullable_forms() -> None:
    """Each kind of optional property gets a nullable form the strict subset accepts."""
    schema = {
        "type": "object",
        "properties": {
            "ref": {"$ref": "#/$defs/Thing"},
            "typed": {"type": "string", "default": "x"},
            "typed_list": {"type": ["string", "integer"]},
            "typed_enum": {"type": "string", "enum": ["a", "b"]},
            "const": {"const": "yes"},
            "union": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
            "already": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
            "required": {"type": "string"},
        },
        "required": ["required"],
        "$defs": {"Thing": {"type": "object", "properties": {}}},
    }
    registry = ToolRegistry()

    async def body(args: object, ctx: trio_tools.ToolRunContext) -> str:
        return ""

    registry.register(ToolDefinition(name="forms", execute=body, parameters=schema))

    [spec] = openai_chat.tool_specs(registry, strict=True)

    assert {
        "type": "object",
        "properties": {
            "ref": {"anyOf": [{"$ref": "#/$defs/Thing"}, {"type": "null"}]},
            "typed": {"type": ["string", "null"]},
            "typed_list": {"type": ["string", "integer", "null"]},
            "typed_enum": {"type": ["string", "null"], "enum": ["a", "b", None]},
            "const": {"anyOf": [{"const": "yes"}, {"type": "null"}]},
            "union": {"anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]},
            "already": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "required": {"type": "string"},
        },
        "required": [
            "ref",
            "typed",
            "typed_list",
            "typed_enum",
            "const",
            "union",
            "already",
            "required",
        ],
        "additionalProperties": False,
        "$defs": {
            "Thing": {
                "type": "object",
                "properties": {},
                "required": [],
                "additionalProperties": False,
            }
        },
    } == spec["function"]["parameters"]


@pytest.mark.parametrize("api", APIS, ids=API_IDS)
def test_strict_raises_naming_the_tool_whose_schema_cannot_be_strict(api: Any) -> None:
    registry = strict_registry()

    @registry.tool
    async def tag_counts(args: TagArgs, ctx: trio_tools.ToolRunContext) -> str:
        """Count tags: a free-form dict[str, int]."""
        return ""

    with pytest.raises(ValueError, match=r"^tool 'tag_counts' cannot be made strict: ") as info:
        api.tool_specs(registry, strict=True)
    assert "additionalProperties" in str(info.value)
    assert "#/properties/counts" in str(info.value)


@attrs.frozen
class PairArgs:
    pair: tuple[int, str]


def test_strict_rejects_a_raw_tool_and_tuples() -> None:
    with pytest.raises(ValueError, match=r"^tool 'screenshot' cannot be made strict: a free-form"):
        openai_chat.tool_specs(build_registry(), strict=True)

    registry = ToolRegistry()

    @registry.tool
    async def pairs(args: PairArgs, ctx: trio_tools.ToolRunContext) -> str:
        """Takes a tuple."""
        return ""

    with pytest.raises(ValueError, match=r"^tool 'pairs' cannot be made strict: 'prefixItems'"):
        openai_responses.tool_specs(registry, strict=True)


def test_strict_leaves_the_registry_schema_alone() -> None:
    registry = strict_registry()
    before = registry.schemas()
    openai_chat.tool_specs(registry, strict=True)

    assert before == registry.schemas()
    definition = registry.get("plan_route")
    assert definition is not None
    assert ("start", "end") == definition.parameters["required"]


@attrs.frozen
class TreeArgs:
    name: str
    children: list[TreeArgs] = attrs.Factory(list)


TREE_NODE = {
    "title": "TreeArgs",
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "children": {"type": "array", "items": {"$ref": "#/$defs/TreeArgs"}, "default": []},
    },
    "required": ["name"],
}


@pytest.mark.parametrize("api", APIS, ids=API_IDS)
async def test_a_recursive_argument_type_has_an_object_schema_at_its_root(api: Any) -> None:
    """Every model API requires the arguments' schema to be an object schema at its root:
    a recursive type's root is its definition, which stays in ``$defs`` for the references
    inside it (a bare ``$ref`` root would be rejected, and could not be made strict)."""
    registry = ToolRegistry()

    @registry.tool
    async def tree(args: TreeArgs, ctx: trio_tools.ToolRunContext) -> str:
        """Count the nodes."""
        return str(len(args.children))

    (spec,) = api.tool_specs(registry)
    conforms(SPEC_TYPE[api], spec)
    parameters = (
        spec["function"]["parameters"]
        if api is openai_chat
        else spec.get("parameters", spec.get("input_schema"))
    )
    assert {**TREE_NODE, "$defs": {"TreeArgs": TREE_NODE}} == parameters
    (strict,) = api.tool_specs(registry, strict=True)
    conforms(SPEC_TYPE[api], strict)
    source = trio_tools.CancelSource()
    call = ToolCall("c1", "tree", '{"name": "a", "children": [{"name": "b"}, {"name": "c"}]}')
    outcome = await trio_tools.run_tool_calls(registry, [call], signal=source.signal)
    assert "2" == outcome.results[0].text


# -- tool_calls -----------------------------------------------------------------------------

STRICT_NULLS = {
    "start": {"lat": 45.76, "lon": 4.83, "label": None},
    "end": {"lat": 48.85, "lon": 2.35, "label": "Paris"},
    "via": None,
    "mode": None,
    "max_km": None,
}
# via and mode may not be null in the tool's own schema: dropped, so their defaults apply.
# max_km (int | None) may be: kept.  Nested nulls (start.label) are not touched.
DROPPED = {
    "start": {"lat": 45.76, "lon": 4.83, "label": None},
    "end": {"lat": 48.85, "lon": 2.35, "label": "Paris"},
    "max_km": None,
}


def chat_message(*calls: tuple[str, str, str]) -> dict[str, Any]:
    message: dict[str, Any] = fake.chat_completion(calls=calls)["choices"][0]["message"]
    return message


def chat_completion(message: dict[str, Any]) -> dict[str, Any]:
    return {
        **fake.chat_completion(),
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": message}],
    }


def responses_output(*calls: tuple[str, str, str]) -> list[dict[str, Any]]:
    """A message item (skipped by tool_calls), then the function_call items."""
    output: list[dict[str, Any]] = fake.response("Checking.", calls)["output"]
    return output


def anthropic_message(*calls: tuple[str, str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 20},
        "content": [
            {"type": "text", "text": "Checking."},
            {
                "type": "server_tool_use",
                "id": "srvtoolu_1",
                "name": "web_search",
                "input": {"query": "x"},
            },
            *(
                {"type": "tool_use", "id": cid, "name": name, "input": args}
                for cid, name, args in calls
            ),
        ],
    }


TWO = (("call_1", "get_weather", '{"city": "Lyon"}'), ("call_2", "write_file", '{"path": "a"}'))
EXPECTED_TWO = (ToolCall(*TWO[0]), ToolCall(*TWO[1]))


def test_chat_tool_calls_from_dicts_and_sdk_objects() -> None:
    message = chat_message(*TWO)
    sdk_message = chat_types.ChatCompletionMessage.model_validate(message)
    sdk_completion = chat_types.ChatCompletion.model_validate(chat_completion(message))

    assert EXPECTED_TWO == openai_chat.tool_calls(message)
    assert EXPECTED_TWO == openai_chat.tool_calls(sdk_message)
    assert EXPECTED_TWO == openai_chat.tool_calls(sdk_completion)
    assert () == openai_chat.tool_calls({"role": "assistant", "content": "Hi."})


def test_responses_tool_calls_from_a_response_or_its_output() -> None:
    output = responses_output(*TWO)
    sdk_items = [
        pydantic.TypeAdapter(responses_types.ResponseOutputItem).validate_python(item)
        for item in output
    ]

    assert EXPECTED_TWO == openai_responses.tool_calls(output)
    assert EXPECTED_TWO == openai_responses.tool_calls({"id": "resp_1", "output": output})
    assert EXPECTED_TWO == openai_responses.tool_calls(sdk_items)


def test_anthropic_tool_calls_skip_server_tools_and_copy_the_input() -> None:
    weather = {"city": "Lyon", "nested": {"list": [1, 2]}}
    message = anthropic_message(("toolu_1", "get_weather", weather), ("toolu_2", "write_file", {}))
    sdk_message = anthropic_types.Message.model_validate(message)

    expected = (ToolCall("toolu_1", "get_weather", weather), ToolCall("toolu_2", "write_file", {}))
    calls = anthropic.tool_calls(message)
    assert expected == calls
    assert expected == anthropic.tool_calls(sdk_message)
    assert calls[0].arguments is not weather
    assert () == anthropic.tool_calls({"role": "assistant", "content": "Hello."})


def test_tool_calls_without_registry_pass_nulls_unchanged() -> None:
    arguments = json.dumps(STRICT_NULLS)
    message = chat_message(("call_1", "plan_route", arguments))

    assert (ToolCall("call_1", "plan_route", arguments),) == openai_chat.tool_calls(message)


@pytest.mark.parametrize("api", [openai_chat, openai_responses], ids=API_IDS[:2])
async def test_openai_tool_calls_drop_strict_nulls_with_registry(api: Any) -> None:
    registry = strict_registry()
    arguments = json.dumps(STRICT_NULLS)
    message: object = (
        chat_message(("call_1", "plan_route", arguments))
        if api is openai_chat
        else responses_output(("call_1", "plan_route", arguments))
    )

    [call] = api.tool_calls(message, registry=registry)

    assert isinstance(call.arguments, str)  # still the model's JSON text
    assert DROPPED == json.loads(call.arguments)
    outcome = await trio_tools.run_tool_calls(
        registry, [call], signal=trio_tools.CancelSource().signal
    )
    assert "walk via 0 point(s), max None" == outcome.results[0].text


async def test_strict_nulls_are_dropped_beside_an_integer_of_any_size() -> None:
    """JSON text parses as the registry parses it: an integer past Python's int-from-text
    digit limit does not keep the strict nulls beside it from being dropped."""
    registry = ToolRegistry()

    @registry.tool
    async def count(n: int, unit: str = "items") -> str:
        """Count."""
        return f"{n == 10**5000} of {unit}"

    huge = "1" + "0" * 5000  # past sys.get_int_max_str_digits() (4300)
    message = chat_message(("call_1", "count", f'{{"n": {huge}, "unit": null}}'))

    [call] = openai_chat.tool_calls(message, registry=registry)

    assert ToolCall("call_1", "count", f'{{"n":{huge}}}') == call
    outcome = await trio_tools.run_tool_calls(
        registry, [call], signal=trio_tools.CancelSource().signal
    )
    assert "True of items" == outcome.results[0].text


def test_anthropic_tool_calls_drop_strict_nulls_with_registry() -> None:
    message = anthropic_message(("toolu_1", "plan_route", STRICT_NULLS))

    [call] = anthropic.tool_calls(message, registry=strict_registry())

    assert DROPPED == call.arguments


def test_null_dropping_keeps_required_and_nullable_and_unknown_properties() -> None:
    registry = strict_registry()
    arguments = '{"city": null, "unit": null, "extra": null}'

    [call] = openai_chat.tool_calls(
        chat_message(("c", "get_weather", arguments)), registry=registry
    )
    assert '{"city":null,"extra":null}' == call.arguments  # unit (not nullable) dropped

    untouched = ['{"start": 1', "[null]", '"text"', "", '{"via": 1e400, "mode": null}']
    for text in untouched:
        [call] = openai_chat.tool_calls(chat_message(("c", "plan_route", text)), registry=registry)
        assert text == call.arguments
    [call] = openai_chat.tool_calls(chat_message(("c", "nope", '{"a": null}')), registry=registry)
    assert '{"a": null}' == call.arguments


def test_tool_calls_reject_what_is_not_a_function_call() -> None:
    custom = {
        "role": "assistant",
        "tool_calls": [{"id": "call_9", "type": "custom", "custom": {"name": "x", "input": "y"}}],
    }
    with pytest.raises(ValueError, match="'call_9' is a 'custom' call"):
        openai_chat.tool_calls(custom)
    with pytest.raises(ValueError, match="no 'name'"):
        openai_responses.tool_calls([{"type": "function_call", "call_id": "c", "arguments": ""}])
    with pytest.raises(ValueError, match="no 'id'"):
        anthropic.tool_calls({"content": [{"type": "tool_use", "name": "x", "input": {}}]})
    with pytest.raises(TypeError, match="model_dump"):
        openai_chat.tool_calls(42)


# -- tool_results ---------------------------------------------------------------------------

DATA_URL = f"data:image/png;base64,{PNG_B64}"
SVG_NOTE = "[image omitted: image/svg+xml is not a supported image type]"
CONTEXTS = ["[memory] The user lives in Lyon.", "Screenshots are 1x1 pixels in this test."]

EXPECTED_CHAT = [
    {"role": "tool", "tool_call_id": "call_1", "content": "Sunny in Lyon, 21 degrees celsius"},
    {
        "role": "tool",
        "tool_call_id": "call_2",
        "content": f"the page\n{SVG_NOTE}\n[1 image(s) in the next user message]",
    },
    {"role": "tool", "tool_call_id": "call_3", "content": "Error: disk full"},
    {"role": "tool", "tool_call_id": "call_4", "content": "Error: tool call aborted"},
    {
        "role": "tool",
        "tool_call_id": "call_5",
        "content": "Error: tool call aborted before dispatch",
    },
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "Images from tool call call_2 (screenshot):"},
            {"type": "image_url", "image_url": {"url": DATA_URL}},
            *({"type": "text", "text": text} for text in CONTEXTS),
        ],
    },
]

EXPECTED_RESPONSES = [
    {
        "type": "function_call_output",
        "call_id": "call_1",
        "output": "Sunny in Lyon, 21 degrees celsius",
    },
    {
        "type": "function_call_output",
        "call_id": "call_2",
        "output": [
            {"type": "input_text", "text": "the page"},
            {"type": "input_image", "image_url": DATA_URL, "detail": "auto"},
            {"type": "input_text", "text": SVG_NOTE},
        ],
    },
    {"type": "function_call_output", "call_id": "call_3", "output": "Error: disk full"},
    {"type": "function_call_output", "call_id": "call_4", "output": "Error: tool call aborted"},
    {
        "type": "function_call_output",
        "call_id": "call_5",
        "output": "Error: tool call aborted before dispatch",
    },
    {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": text} for text in CONTEXTS],
    },
]


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


EXPECTED_ANTHROPIC = [
    {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "call_1",
                "is_error": False,
                "content": [_text("Sunny in Lyon, 21 degrees celsius")],
            },
            {
                "type": "tool_result",
                "tool_use_id": "call_2",
                "is_error": False,
                "content": [
                    _text("the page"),
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64},
                    },
                    _text(SVG_NOTE),
                ],
            },
            {
                "type": "tool_result",
                "tool_use_id": "call_3",
                "is_error": True,
                "content": [_text("Error: disk full")],
            },
            {
                "type": "tool_result",
                "tool_use_id": "call_4",
                "is_error": True,
                "content": [_text("Error: tool call aborted")],
            },
            {
                "type": "tool_result",
                "tool_use_id": "call_5",
                "is_error": True,
                "content": [_text("Error: tool call aborted before dispatch")],
            },
            *(_text(text) for text in CONTEXTS),
        ],
    }
]

EXPECTED_RESULTS = {
    openai_chat: EXPECTED_CHAT,
    openai_responses: EXPECTED_RESPONSES,
    anthropic: EXPECTED_ANTHROPIC,
}


@pytest.mark.parametrize("api", APIS, ids=API_IDS)
async def test_tool_results_of_a_mixed_outcome(api: Any, autojump_clock: trio.abc.Clock) -> None:
    """Success, images (one of an unsupported type), an error, ABORTED, a synthetic
    ABORTED_BEFORE_DISPATCH and two contexts: every call answered once, in model order."""
    calls, outcome = await mixed_outcome()

    messages = api.tool_results(calls, outcome)

    assert EXPECTED_RESULTS[api] == messages
    assert_plain_json(messages)
    for message in messages:
        conforms(RESULT_TYPE[api], message)


def test_negative_control_chat_tool_message_cannot_carry_an_image() -> None:
    message = {
        "role": "tool",
        "tool_call_id": "call_2",
        "content": [{"type": "image_url", "image_url": {"url": DATA_URL}}],
    }
    with pytest.raises(AssertionError, match="not a valid"):
        conforms(chat_types.ChatCompletionMessageParam, message)


def test_negative_control_anthropic_rejects_unsupported_images_and_unknown_keys() -> None:
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/svg+xml", "data": "x"},
    }
    result = {"type": "tool_result", "tool_use_id": "t", "content": [image]}
    with pytest.raises(AssertionError, match="not a valid"):
        conforms(anthropic_types.MessageParam, {"role": "user", "content": [result]})
    misspelled = {"type": "tool_result", "tool_use_id": "t", "is_eror": True}
    with pytest.raises(AssertionError, match="drops or changes"):
        conforms(anthropic_types.MessageParam, {"role": "user", "content": [misspelled]})


def test_negative_control_responses_output_rejects_chat_style_images() -> None:
    item = {
        "type": "function_call_output",
        "call_id": "c",
        "output": [{"type": "image_url", "image_url": {"url": DATA_URL}}],
    }
    with pytest.raises(AssertionError):
        conforms(responses_types.ResponseInputItemParam, item)


def _outcome(*results: trio_tools.ToolResult) -> BatchOutcome:
    contexts = tuple(c for r in results for c in r.additional_contexts)
    return BatchOutcome(
        results=results, aborted=False, halt=None, concludes_turn=False, contexts=contexts
    )


@pytest.mark.parametrize("api", APIS, ids=API_IDS)
def test_tool_results_of_nothing_is_nothing(api: Any) -> None:
    assert [] == api.tool_results([], _outcome())


@pytest.mark.parametrize("api", APIS, ids=API_IDS)
def test_tool_results_check_calls_against_the_outcome(api: Any) -> None:
    ok = trio_tools.ToolResult(content=(trio_tools.TextBlock("ok"),))
    with pytest.raises(ValueError, match="2 call"):
        api.tool_results([ToolCall("a", "t", "{}"), ToolCall("b", "t", "{}")], _outcome(ok))
    with pytest.raises(TypeError, match="ToolCall"):
        api.tool_results([("a", "t", "{}")], _outcome(ok))
    with pytest.raises(TypeError, match="BatchOutcome"):
        api.tool_results([ToolCall("a", "t", "{}")], [ok])


@pytest.mark.parametrize("api", APIS, ids=API_IDS)
def test_an_empty_result_is_still_an_answer(api: Any) -> None:
    empty = trio_tools.ToolResult(content=())
    messages = api.tool_results([ToolCall("a", "t", "{}")], _outcome(empty))

    for message in messages:
        conforms(RESULT_TYPE[api], message)
    expected = {
        openai_chat: [{"role": "tool", "tool_call_id": "a", "content": ""}],
        openai_responses: [{"type": "function_call_output", "call_id": "a", "output": ""}],
        anthropic: [
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "a", "is_error": False}],
            }
        ],
    }
    assert expected[api] == messages


# -- streams --------------------------------------------------------------------------------

WEATHER_ARGS = '{"city": "Lyon", "unit": "celsius"}'
WRITE_ARGS = '{"path": "a.txt", "text": "h\\u00e9"}'
STREAMED = (
    ToolCall("call_1", "get_weather", WEATHER_ARGS),
    ToolCall("call_2", "write_file", WRITE_ARGS),
)


def chat_chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-test",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def chat_stream(first: list[str], second: list[str]) -> list[dict[str, Any]]:
    """A recorded Chat Completions stream: some text, two tool calls, usage."""

    def call_deltas(index: int, cid: str, name: str, pieces: list[str]) -> list[dict[str, Any]]:
        head = {"index": index, "id": cid, "type": "function"}
        return [
            chat_chunk({"tool_calls": [{**head, "function": {"name": name, "arguments": ""}}]}),
            *(
                chat_chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
                for piece in pieces
            ),
        ]

    return [
        chat_chunk({"role": "assistant", "content": ""}),
        chat_chunk({"content": "Let me check."}),
        *call_deltas(0, "call_1", "get_weather", first),
        *call_deltas(1, "call_2", "write_file", second),
        chat_chunk({}, finish="tool_calls"),
        {
            **chat_chunk({}),
            "choices": [],
            "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3},
        },
    ]


def responses_stream(first: list[str], second: list[str]) -> list[dict[str, Any]]:
    """A recorded Responses stream: a message item, then two function_call items."""
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": {"id": "resp_1", "output": []}},
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {
                "type": "message",
                "id": "msg_1",
                "role": "assistant",
                "content": [],
                "status": "in_progress",
            },
        },
        {
            "type": "response.output_text.delta",
            "output_index": 0,
            "item_id": "msg_1",
            "content_index": 0,
            "delta": "Checking.",
        },
    ]
    for index, (cid, name, pieces, full) in enumerate(
        [
            ("call_1", "get_weather", first, WEATHER_ARGS),
            ("call_2", "write_file", second, WRITE_ARGS),
        ],
        start=1,
    ):
        item = {"type": "function_call", "id": f"fc_{index}", "call_id": cid, "name": name}
        events.append(
            {
                "type": "response.output_item.added",
                "output_index": index,
                "item": {**item, "arguments": "", "status": "in_progress"},
            }
        )
        events.extend(
            {
                "type": "response.function_call_arguments.delta",
                "output_index": index,
                "item_id": f"fc_{index}",
                "delta": piece,
            }
            for piece in pieces
        )
        if "".join(pieces) == full:  # a complete stream ends each call with its done events
            events.append(
                {
                    "type": "response.function_call_arguments.done",
                    "output_index": index,
                    "item_id": f"fc_{index}",
                    "arguments": full,
                }
            )
            events.append(
                {
                    "type": "response.output_item.done",
                    "output_index": index,
                    "item": {**item, "arguments": full, "status": "completed"},
                }
            )
    for number, event in enumerate(events):
        event["sequence_number"] = number
    return events


def anthropic_stream(first: list[str], second: list[str]) -> list[dict[str, Any]]:
    """A recorded Messages stream: a text block, then two tool_use blocks."""
    events: list[dict[str, Any]] = [
        {
            "type": "message_start",
            "message": {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": "claude-test",
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": 10, "output_tokens": 1},
            },
        },
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "text_delta", "text": "Checking."},
        },
        {"type": "content_block_stop", "index": 0},
    ]
    for index, (cid, name, pieces) in enumerate(
        [("call_1", "get_weather", first), ("call_2", "write_file", second)], start=1
    ):
        events.append(
            {
                "type": "content_block_start",
                "index": index,
                "content_block": {"type": "tool_use", "id": cid, "name": name, "input": {}},
            }
        )
        events.extend(
            {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "input_json_delta", "partial_json": piece},
            }
            for piece in pieces
        )
        events.append({"type": "content_block_stop", "index": index})
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {"output_tokens": 30},
        }
    )
    events.append({"type": "message_stop"})
    return events


STREAMS: dict[Any, Callable[[list[str], list[str]], list[dict[str, Any]]]] = {
    openai_chat: chat_stream,
    openai_responses: responses_stream,
    anthropic: anthropic_stream,
}


def assemble(api: Any, events: Iterable[object]) -> tuple[ToolCall, ...]:
    assembler = api.StreamAssembler()
    for event in events:
        assembler.feed(event)
    return assembler.tool_calls()


@pytest.mark.parametrize("api", APIS, ids=API_IDS)
def test_stream_assembly_with_arguments_split_at_every_boundary(api: Any) -> None:
    streams = [STREAMS[api]]
    if api is openai_responses:
        # The deltas alone, too: the done events carry the whole arguments and would win.
        streams.append(
            lambda first, second: [
                e for e in responses_stream(first, second) if not e["type"].endswith(".done")
            ]
        )
    for stream in streams:
        for pieces in splits(WEATHER_ARGS):
            assert STREAMED == assemble(api, stream(pieces, list(WRITE_ARGS))), pieces
        for pieces in splits(WRITE_ARGS):
            assert STREAMED == assemble(api, stream([WEATHER_ARGS], pieces)), pieces


def test_stream_assembly_from_sdk_event_objects() -> None:
    events = chat_stream([WEATHER_ARGS[:5], WEATHER_ARGS[5:]], [WRITE_ARGS])
    assert STREAMED == assemble(
        openai_chat, [chat_types.ChatCompletionChunk.model_validate(e) for e in events]
    )
    adapter = pydantic.TypeAdapter(anthropic_types.RawMessageStreamEvent)
    events = anthropic_stream([WEATHER_ARGS[:5], WEATHER_ARGS[5:]], [WRITE_ARGS])
    assert STREAMED == assemble(anthropic, [adapter.validate_python(e) for e in events])
    responses_adapter = pydantic.TypeAdapter(responses_types.ResponseStreamEvent)
    # Only the events of the calls: the recorded text events leave out fields (logprobs,
    # a whole Response) that the SDK's models require; the end-to-end test has them all.
    events = [
        e
        for e in responses_stream([WEATHER_ARGS[:5], WEATHER_ARGS[5:]], [WRITE_ARGS])
        if e["type"].startswith("response.function_call")
        or e.get("item", {}).get("type") == "function_call"
    ]
    assert STREAMED == assemble(
        openai_responses, [responses_adapter.validate_python(e) for e in events]
    )


def test_responses_done_events_win_over_the_deltas() -> None:
    events = responses_stream([WEATHER_ARGS], [WRITE_ARGS])
    for event in events:
        if event["type"] == "response.function_call_arguments.delta":
            event["delta"] = "garbage"

    assert STREAMED == assemble(openai_responses, events)


def test_a_stream_with_no_tool_calls_has_none() -> None:
    assert () == assemble(
        openai_chat, [chat_chunk({"content": "Hi."}), chat_chunk({}, finish="stop")]
    )
    assert () == assemble(anthropic, anthropic_stream([], [])[:4])
    assert () == assemble(openai_responses, responses_stream([], [])[:3])


def test_an_anthropic_server_tool_streams_its_input_and_is_skipped() -> None:
    """A server tool (web search, run by Anthropic itself) streams its input as
    ``input_json_delta``\\ s too: they are skipped, like its block in ``tool_calls``."""
    adapter = pydantic.TypeAdapter(anthropic_types.RawMessageStreamEvent)
    server_tool = [
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {
                "type": "server_tool_use",
                "id": "srvtoolu_1",
                "name": "web_search",
                "input": {},
            },
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": '{"query": "trio"}'},
        },
        {"type": "content_block_stop", "index": 0},
    ]
    tool_use = [
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {}},
        },
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": '{"city": "Lyon"}'},
        },
        {"type": "content_block_stop", "index": 1},
    ]

    calls = assemble(anthropic, [adapter.validate_python(e) for e in server_tool + tool_use])

    assert (ToolCall("t1", "get_weather", '{"city": "Lyon"}'),) == calls


def test_an_anthropic_tool_use_without_deltas_has_its_start_input() -> None:
    events = [
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "tool_use", "id": "t1", "name": "x", "input": {}},
        },
        {"type": "content_block_stop", "index": 0},
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {"type": "tool_use", "id": "t2", "name": "y", "input": {"a": [1]}},
        },
    ]

    assert (ToolCall("t1", "x", ""), ToolCall("t2", "y", {"a": [1]})) == assemble(anthropic, events)


def test_stream_assemblers_reject_malformed_streams() -> None:
    with pytest.raises(ValueError, match="no 'choices'"):
        openai_chat.StreamAssembler().feed({"type": "response.created"})
    with pytest.raises(ValueError, match="never started"):
        openai_responses.StreamAssembler().feed(
            {
                "type": "response.function_call_arguments.delta",
                "output_index": 3,
                "item_id": "x",
                "delta": "{",
            }
        )
    with pytest.raises(ValueError, match="no started tool_use"):
        anthropic.StreamAssembler().feed(
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": "{"},
            }
        )
    with pytest.raises(ValueError, match="no 'type'"):
        anthropic.StreamAssembler().feed({"index": 0})
    assembler = openai_chat.StreamAssembler()
    assembler.feed(chat_chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}))
    with pytest.raises(ValueError, match="#0 is incomplete"):
        assembler.tool_calls()
    assembler = openai_chat.StreamAssembler()
    assembler.feed(chat_chunk({"tool_calls": [{"index": 0, "id": 7, "function": {"name": "x"}}]}))
    with pytest.raises(ValueError, match="#0 has a non-str id 7"):
        assembler.tool_calls()


def test_chat_stream_assembles_only_the_first_choice() -> None:
    other = chat_chunk(
        {"tool_calls": [{"index": 0, "id": "x", "function": {"name": "n", "arguments": "{}"}}]}
    )
    other["choices"][0]["index"] = 1
    events = [*chat_stream([WEATHER_ARGS], [WRITE_ARGS]), other]

    assert STREAMED == assemble(openai_chat, events)


@pytest.mark.parametrize("api", APIS, ids=API_IDS)
async def test_a_stream_cut_mid_arguments_gives_invalid_args(
    api: Any, autojump_clock: trio.abc.Clock
) -> None:
    """The partial text stays; the call runs and its validation reports it."""
    cut = WRITE_ARGS[: len(WRITE_ARGS) // 2]
    calls = assemble(api, STREAMS[api]([WEATHER_ARGS], [cut]))
    assert (STREAMED[0], ToolCall("call_2", "write_file", cut)) == calls

    registry = build_registry(Gates())
    outcome = await trio_tools.run_tool_calls(
        registry, calls, signal=trio_tools.CancelSource().signal
    )

    assert [None, INVALID_ARGS] == [result.code for result in outcome.results]
    assert (
        "Error: invalid arguments: not valid JSON "
        "(Expecting property name enclosed in double quotes at line 1 column 19)"
    ) == outcome.results[1].text


# -- the public surface ---------------------------------------------------------------------


@pytest.mark.parametrize("api", APIS, ids=API_IDS)
def test_each_module_has_the_same_public_names(api: Any) -> None:
    assert ["StreamAssembler", "tool_calls", "tool_results", "tool_specs"] == sorted(api.__all__)
    for name in api.__all__:
        value = getattr(api, name)
        assert api.__name__ == value.__module__
        assert (value.__doc__ or "").strip(), name
    assert getattr(api.StreamAssembler, "__final__", False) is True
    assert "<" in repr(api.StreamAssembler())


def test_the_providers_import_no_sdk() -> None:
    """No SDK (nor pydantic) is a run-time dependency; ``import trio_tools`` does not even
    import the providers."""
    code = (
        "import sys, trio_tools\n"
        "assert 'trio_tools.providers' not in sys.modules\n"
        "import trio_tools.providers\n"
        "from trio_tools.providers import openai_chat, openai_responses, anthropic\n"
        "loaded = {'openai', 'anthropic', 'pydantic', 'httpx', 'h11'} & set(sys.modules)\n"
        "assert not loaded, loaded\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert 0 == done.returncode, done.stderr
