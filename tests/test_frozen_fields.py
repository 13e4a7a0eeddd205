"""Objects built as their slots' plain base are exactly the frozen attrs objects they stand for.

The registry builds its results, and ``ToolExecutionInput(...)`` builds the input, as an
object of the plain base class that holds the slots, which then becomes the frozen class
(``trio_tools._frozen``).  What
comes out must be indistinguishable from what the public constructor or attrs would make:
the type, equality, hashing, repr, pickling, copying, weak references, ``attrs.evolve`` and
the refusal of assignment.
"""

from __future__ import annotations

import copy
import pickle
import weakref
from typing import Any

import attrs
import pytest

from trio_tools import (
    AdditionalContext,
    CancelSource,
    ErrorInfo,
    Halt,
    TextBlock,
    ToolExecutionInput,
    ToolRegistry,
    ToolResult,
    ToolRunContext,
)
from trio_tools._frozen import check_fields_base
from trio_tools._results import error_result, make_result, replace_result, text_block, text_result


def _same_frozen_object(made: Any, expected: attrs.AttrsInstance, *, deep: bool = True) -> None:
    assert type(made) is type(expected)
    assert made == expected
    assert not made != expected  # noqa: SIM202 - attrs' own __ne__
    assert repr(made) == repr(expected)
    assert attrs.asdict(made, recurse=False) == attrs.asdict(expected, recurse=False)
    assert weakref.ref(made)() is made
    assert copy.copy(made) == expected
    # (A deep copy of an input copies its signal, which compares by identity.)
    assert type(copy.deepcopy(made)) is type(expected)
    assert not deep or copy.deepcopy(made) == expected
    for field in attrs.fields(type(expected)):
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            setattr(made, field.name, None)
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            delattr(made, field.name)
    assert not hasattr(made, "__dict__")


RESULTS = [
    pytest.param(lambda: text_result("ok"), ToolResult(content=(TextBlock("ok"),)), id="text"),
    pytest.param(
        lambda: make_result(
            (text_block("a"), text_block("b")),
            additional_contexts=(AdditionalContext("later", source="s"),),
            meta=7,
            concludes_turn=True,
            halt=Halt("stop"),
            synthetic=True,
        ),
        ToolResult(
            content=(TextBlock("a"), TextBlock("b")),
            additional_contexts=(AdditionalContext("later", source="s"),),
            meta=7,
            concludes_turn=True,
            halt=Halt("stop"),
            synthetic=True,
        ),
        id="every-field",
    ),
    pytest.param(
        lambda: error_result("E", "CODE", "bad"),
        ToolResult(
            content=(TextBlock("Error: bad"),),
            is_error=True,
            error=ErrorInfo("E", "CODE", "bad"),
        ),
        id="error",
    ),
    pytest.param(
        lambda: replace_result(text_result("ok"), meta=1, halt=Halt("h")),
        ToolResult(content=(TextBlock("ok"),), meta=1, halt=Halt("h")),
        id="replaced",
    ),
]


@pytest.mark.parametrize(("make", "expected"), RESULTS)
def test_a_library_made_result_is_the_public_constructors(make: Any, expected: ToolResult) -> None:
    made = make()
    _same_frozen_object(made, expected)
    assert hash(made) == hash(expected)
    assert pickle.loads(pickle.dumps(made)) == expected
    assert ToolResult.from_dict(made.to_dict()) == expected
    assert attrs.evolve(made, meta=2) == attrs.evolve(expected, meta=2)
    for block in made.content:
        _same_frozen_object(block, TextBlock(block.text))


async def test_execute_returns_a_result_like_the_public_constructors() -> None:
    registry = ToolRegistry()

    async def hello(args: object, ctx: ToolRunContext) -> str:
        """Says hello."""
        return "hello"

    registry.tool(hello)
    source = CancelSource()
    result = await registry.execute(
        ToolExecutionInput(call_id="c", name="hello", arguments={}, signal=source.signal)
    )
    _same_frozen_object(result, ToolResult(content=(TextBlock("hello"),)))


def test_an_input_is_what_attrs_would_make() -> None:
    source = CancelSource()
    token_source = CancelSource()
    progress: list[object] = []
    made = ToolExecutionInput(
        call_id="c",
        name="n",
        arguments=(1, 2),
        signal=source.signal,
        agent="agent",
        on_progress=progress.append,
    )
    assert [field.name for field in attrs.fields(ToolExecutionInput)] == [
        "call_id",
        "name",
        "arguments",
        "signal",
        "agent",
        "parent",
        "on_progress",
    ]
    assert (made.call_id, made.name, made.arguments, made.signal, made.agent) == (
        "c",
        "n",
        (1, 2),
        source.signal,
        "agent",
    )
    assert made.parent is None
    assert made.on_progress == progress.append
    evolved = attrs.evolve(made, name="m", signal=token_source.signal)
    assert (evolved.name, evolved.signal) == ("m", token_source.signal)
    _same_frozen_object(made, attrs.evolve(made), deep=False)
    # A signal compares by identity, so the copy's is put back before comparing.
    loaded = pickle.loads(pickle.dumps(attrs.evolve(made, on_progress=None)))
    assert type(loaded) is ToolExecutionInput
    assert attrs.evolve(loaded, signal=source.signal) == attrs.evolve(made, on_progress=None)


def test_an_input_still_refuses_bad_fields() -> None:
    signal = CancelSource().signal
    bad: dict[str, Any] = {"call_id": 1}
    with pytest.raises(TypeError, match="call_id must be a str"):
        ToolExecutionInput(name="n", arguments={}, signal=signal, **bad)
    bad = {"name": b"n"}
    with pytest.raises(TypeError, match="name must be a str"):
        ToolExecutionInput(call_id="c", arguments={}, signal=signal, **bad)
    bad = {"parent": "token"}
    with pytest.raises(TypeError, match="parent must be an ExecutionToken or None"):
        ToolExecutionInput(call_id="c", name="n", arguments={}, signal=signal, **bad)
    bad = {"on_progress": 3}
    with pytest.raises(TypeError, match="on_progress must be callable or None"):
        ToolExecutionInput(call_id="c", name="n", arguments={}, signal=signal, **bad)


def test_a_subclass_of_the_input_gets_its_fields_too() -> None:
    # Final to the type checkers only: at run time a subclass (here with a __dict__, so of
    # another layout) is built through the slot descriptors instead.
    class Sub(ToolExecutionInput):  # type: ignore[misc]  # pyright: ignore[reportGeneralTypeIssues]
        pass

    signal = CancelSource().signal
    made = Sub(call_id="c", name="n", arguments={}, signal=signal)
    assert type(made) is Sub
    assert (made.call_id, made.name, made.signal, made.agent) == ("c", "n", signal, None)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        setattr(made, "name", "m")  # noqa: B010 - the type checkers know it is frozen


def test_a_class_not_built_on_its_slots_base_is_refused() -> None:
    @attrs.frozen
    class OwnSlots:  # attrs gives it its own slots: no plain base holds them
        x: int

    with pytest.raises(TypeError, match="cannot be built as"):
        check_fields_base(OwnSlots)

    class PartialBase:
        __slots__ = ("__weakref__", "x")

    @attrs.frozen
    class MoreFields(PartialBase):  # attrs adds a slot for y
        x: int
        y: int

    with pytest.raises(TypeError, match="cannot be built as"):
        check_fields_base(MoreFields)

    class Base:
        __slots__ = ("__weakref__", "x")

    @attrs.frozen
    class Built(Base):
        x: int

    assert check_fields_base(Built) is Base
    made: Any = object.__new__(Base)
    made.x = 1
    made.__class__ = Built
    _same_frozen_object(made, Built(1))
