"""The per-call fast paths keep the exact behaviour of what they replace.

``checkpoint_due()`` is Trio's own "would this checkpoint raise?", read without awaiting:
``execute`` awaits ``checkpoint_if_cancelled()`` after a successful dispatch only when it is
due, so it must say yes exactly when the await would raise, for cancellation and for a
``KeyboardInterrupt`` waiting for the main task.  A signature tool's body is called by a
caller generated for it, with the same keywords in the same order as ``fn(**fields)``.  A
signal binds a scope as its own key and
listener; anything else stays an ordinary listener.  A class of scalar fields is parsed
through a msgpack decoder made for it: it must give what ``parse_arguments`` gives (the same
value, or the same violations), for every input.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import signal
from typing import Annotated, Any

import attrs
import msgspec
import pytest
import trio
import trio.lowlevel
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import json_scalars, json_values

from trio_tools import (
    CancelSource,
    TextBlock,
    ToolExecutionInput,
    ToolRegistry,
    ToolResult,
    ToolRunContext,
    define_tool,
)
from trio_tools._arguments import argument_parser, parse_arguments
from trio_tools._json import NotJSONError, freeze
from trio_tools._util import cancelled_here, checkpoint_due


async def raises_at_checkpoint() -> bool:
    try:
        await trio.lowlevel.checkpoint_if_cancelled()
    except trio.Cancelled:
        return True
    return False


async def test_not_due_outside_a_cancelled_scope() -> None:
    assert not checkpoint_due()
    assert not await raises_at_checkpoint()


async def test_due_in_a_cancelled_scope_and_the_checkpoint_raises() -> None:
    with trio.CancelScope() as scope:
        scope.cancel()
        assert checkpoint_due()
        assert await raises_at_checkpoint()


async def test_due_in_a_scope_inside_a_cancelled_one() -> None:
    with trio.CancelScope() as outer:
        outer.cancel()
        with trio.CancelScope():
            assert checkpoint_due()
            assert await raises_at_checkpoint()


async def test_not_due_under_a_shield() -> None:
    with trio.CancelScope() as outer:
        outer.cancel()
        with trio.CancelScope(shield=True):
            assert not checkpoint_due()
            assert not await raises_at_checkpoint()


async def test_not_due_once_the_deadline_has_not_yet_passed() -> None:
    with trio.move_on_after(3600):
        assert not checkpoint_due()
        assert not await raises_at_checkpoint()


class _TaskOfAnotherTrio:
    """A task as a Trio with different internals would have it: no ``_cancel_status``."""


async def test_without_trios_internals_always_due_and_cancelled_here_stays_right(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Both helpers read Trio internals; without them they fall back to public behaviour:
    the checkpoint is always taken, and ``cancelled_here`` answers from the deadline."""
    monkeypatch.setattr(trio.lowlevel, "current_task", _TaskOfAnotherTrio)
    assert checkpoint_due()
    assert not cancelled_here()
    with trio.CancelScope() as scope:
        scope.cancel()
        assert cancelled_here()
        assert checkpoint_due()
        with pytest.raises(trio.Cancelled):
            await trio.lowlevel.checkpoint_if_cancelled()


def test_due_for_a_pending_keyboard_interrupt_and_execute_delivers_it() -> None:
    """A Ctrl-C that arrives during a body that returns without a checkpoint waits for the
    main task's next checkpoint: ``execute``'s check after dispatch is that checkpoint."""
    seen: list[object] = []
    registry = ToolRegistry()

    @registry.tool
    async def interrupted(args: object, ctx: ToolRunContext) -> str:
        """Gets a Ctrl-C and returns at once."""
        signal.raise_signal(signal.SIGINT)
        return "done"

    async def main() -> None:
        source = CancelSource()
        call = ToolExecutionInput(
            call_id="c1", name="interrupted", arguments={}, signal=source.signal
        )
        try:
            seen.append(await registry.execute(call))
        finally:
            seen.append("execute left")

    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        trio.run(main, restrict_keyboard_interrupt_to_checkpoints=True)
    assert before == signal.getsignal(signal.SIGINT)
    assert ["execute left"] == seen  # raised from inside execute: it returned nothing


def test_a_pending_keyboard_interrupt_is_due_in_the_main_task() -> None:
    due: list[object] = []

    async def main() -> None:
        signal.raise_signal(signal.SIGINT)  # pending until the main task's next checkpoint
        due.append(checkpoint_due())
        await trio.lowlevel.checkpoint_if_cancelled()
        due.append("not reached")

    with pytest.raises(KeyboardInterrupt):
        trio.run(main, restrict_keyboard_interrupt_to_checkpoints=True)
    assert [True] == due


def test_a_pending_keyboard_interrupt_is_not_due_in_another_task() -> None:
    """Trio delivers a pending Ctrl-C to the main task only."""
    due: list[bool] = []

    async def other_task() -> None:
        signal.raise_signal(signal.SIGINT)
        due.append(checkpoint_due())

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(other_task)

    with pytest.raises(KeyboardInterrupt):
        trio.run(main, restrict_keyboard_interrupt_to_checkpoints=True)
    assert [False] == due


async def test_a_bound_scope_is_cancelled_with_the_reason_text() -> None:
    source = CancelSource()
    with source.signal.open_scope() as scope:
        assert 1 == source.signal.statistics().listeners
        source.cancel("stop", code="USER")
        assert scope.cancel_called
        await trio.lowlevel.checkpoint()
    assert scope.cancelled_caught
    assert 0 == source.signal.statistics().listeners


async def test_a_scope_given_to_add_listener_is_an_ordinary_listener(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Only the registry's own binding cancels a scope directly: a scope passed where a
    callable belongs fails like any raising listener (logged), and stays uncancelled."""
    source = CancelSource()
    scope = trio.CancelScope()
    not_a_listener: Any = scope
    source.signal.add_listener(not_a_listener)
    with caplog.at_level(logging.ERROR, logger="trio_tools"):
        source.cancel()
    assert not scope.cancel_called
    assert ["cancel listener %r raised"] == [record.msg for record in caplog.records]


# -- a scalar argument class's own decoder ------------------------------------------------


@attrs.frozen
class Pair:
    a: int
    b: int


@attrs.frozen(kw_only=True)
class Constrained:
    n: Annotated[int, msgspec.Meta(ge=0, le=10, description="a small count")] = 3
    word: Annotated[str, msgspec.Meta(min_length=1, max_length=3, pattern="^[a-z]+$")] = "x"
    step: Annotated[float, msgspec.Meta(gt=0.5, multiple_of=0.5)] = 1.0
    label: str | None = None
    either: int | str | None = 0
    flag: bool = False


@attrs.frozen
class Validated:
    _private: int = 0
    ratio: float = attrs.field(default=0.0, validator=attrs.validators.instance_of(float))


@dataclasses.dataclass
class Plain:
    a: int
    f: float = 2.0


class Renamed(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    some_field: int
    other: str | None = None


@attrs.frozen
class WithList:  # not all scalars: the general path
    items: list[int]
    anything: Any = None


SCALAR_CLASSES = [Pair, Constrained, Validated, Plain, Renamed]
KEYS: dict[type[Any], list[str]] = {
    Pair: ["a", "b"],
    Constrained: ["n", "word", "step", "label", "either", "flag"],
    Validated: ["_private", "private", "ratio"],
    Plain: ["a", "f"],
    Renamed: ["someField", "some_field", "other"],
    WithList: ["items", "anything"],
}
edge_integers = [
    0,
    1,
    -1,
    3,
    7,
    11,
    2**53 + 1,
    2**63 - 1,
    2**63,
    2**64 - 1,
    2**64,
    -(2**63),
    -(2**63) - 1,
]
edge_scalars = st.sampled_from(
    [*edge_integers, 0.0, -0.0, 0.5, 1.0, 1.5, 1e308, 5e-324, "", "a", "abcd", "A", "\ud800", "1"]
)
values = edge_scalars | json_scalars | json_values | st.lists(st.integers(), max_size=3)


def class_and_arguments(cls: type[Any]) -> st.SearchStrategy[tuple[type[Any], dict[str, Any]]]:
    keys = st.sampled_from([*KEYS[cls], "zz"])
    return st.tuples(st.just(cls), st.dictionaries(keys, values, max_size=8))


@settings(max_examples=500, deadline=None)
@given(case=st.sampled_from(list(KEYS)).flatmap(class_and_arguments))
def test_a_definitions_parser_is_parse_arguments(case: tuple[type[Any], dict[str, Any]]) -> None:
    cls, raw = case
    try:
        arguments = freeze(raw)
    except NotJSONError:
        return
    assert parse_arguments(cls, arguments) == argument_parser(cls)(arguments)


def test_other_classes_keep_the_general_path() -> None:
    """An ``Any`` field gets the frozen value itself (a tuple): a decoder would give a list."""
    arguments = freeze({"items": [1, 2], "anything": [1, 2]})
    expected = parse_arguments(WithList, arguments)
    assert (1, 2) == expected[0].anything
    assert expected == argument_parser(WithList)(arguments)


@pytest.mark.parametrize("cls", SCALAR_CLASSES)
def test_scalar_classes_get_their_own_decoder(cls: type[Any]) -> None:
    """(Only what the equivalence test above covers takes the decoder.)"""
    assert "parse_arguments" not in argument_parser(cls).__qualname__
    assert "<lambda>" in argument_parser(WithList).__qualname__


def test_the_class_code_runs_as_often_as_with_parse_arguments() -> None:
    calls: list[object] = []

    def record(_instance: object, _attribute: object, value: int) -> None:
        calls.append(value)
        if value < 0:
            raise ValueError("must not be negative")

    @attrs.frozen
    class Counted:
        n: int = attrs.field(validator=record)

        def __attrs_post_init__(self) -> None:
            calls.append("post-init")

    parse = argument_parser(Counted)
    for raw in ({"n": 1}, {"n": -1}, {"n": "x"}, {"n": 2**70}):
        arguments = freeze(raw)
        expected = parse_arguments(Counted, arguments)
        expected_calls, calls[:] = list(calls), []
        assert expected == parse(arguments)
        assert expected_calls == calls
        calls.clear()


# -- a signature tool's generated caller --------------------------------------------------


def recording(calls: list[dict[str, object]]) -> Any:
    """A decorator whose wrapper sees the keywords exactly as the registry passes them."""

    def decorate(fn: Any) -> Any:
        @functools.wraps(fn)
        async def wrapper(**keywords: object) -> object:
            calls.append(keywords)
            return await fn(**keywords)

        return wrapper

    return decorate


async def call_tool(tool: Any, arguments: dict[str, object]) -> ToolResult:
    registry = ToolRegistry()
    registry.register(define_tool(tool, name="t"))
    call = ToolExecutionInput(
        call_id="c", name="t", arguments=arguments, signal=CancelSource().signal
    )
    return await registry.execute(call)


async def test_a_signature_body_gets_every_field_as_a_keyword_in_order_then_the_context() -> None:
    calls: list[dict[str, object]] = []

    @recording(calls)
    async def tool(fn: str, args: int = 2, *, ctx: ToolRunContext, astuple: bool = False) -> str:
        """Parameters named like the generated caller's own names."""
        assert isinstance(ctx, ToolRunContext)
        return "ok"

    assert ToolResult(content=(TextBlock("ok"),)) == await call_tool(tool, {"fn": "x"})
    ((keywords,),) = [calls]
    assert ["fn", "args", "astuple", "ctx"] == list(keywords)
    assert ("x", 2, False) == (keywords["fn"], keywords["args"], keywords["astuple"])


async def test_a_signature_body_without_fields_or_context() -> None:
    calls: list[dict[str, object]] = []

    @recording(calls)
    async def tool() -> str:
        """Nothing to pass."""
        return "ok"

    await call_tool(tool, {})
    assert [{}] == calls


async def test_a_partial_signature_body_gets_its_own_keywords_merged() -> None:
    seen: list[tuple[str, int]] = []

    async def tool(name: str, count: int, *, ctx: ToolRunContext) -> str:
        """A partial binds `count`."""
        seen.append((name, count))
        return "ok"

    await call_tool(functools.partial(tool, count=5), {"name": "n"})
    assert [("n", 5)] == seen
