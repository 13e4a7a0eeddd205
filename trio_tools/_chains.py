"""The middleware chains: how each stage's ``call_next`` reaches the next stage.

Every chain is a few small slotted objects and no closures: a finished call leaves no
reference cycle behind for the cyclic garbage collector.  A ``call_next`` works at most
once, and only while its chain runs: a stage that keeps it and calls it after returning
would otherwise run the rest of the chain (for around-execute: the tool body) outside any
call, after its result was decided.
"""

# the package's modules share underscore helpers with each other:
# pyright: reportPrivateUsage=false
# run-time validation of values from untyped callers:
# pyright: reportUnnecessaryIsInstance=false

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ._decisions import Accept, Allow, Ask, PostDecision, PreDecision
from ._execution import ToolDispatchExecution, _Run
from ._results import ToolResult
from ._stages import AroundWrapper
from ._util import logger, safe_repr

ALLOW = Allow()  # also what the gate decides without a chain
_ASK = Ask()
ACCEPT = Accept()  # what post-execute decides without a hook changing it


class Chain:
    """One pre- or post-execute chain: its hooks, what each receives, its end, whether it is
    still running; and the first hook's ``call_next``.

    It has no ``__init__``: made once per call, it is built as ``chain = Chain()`` and
    every field below set (``open`` to ``True``, ``_called`` to ``False``), since a
    constructor's frame costs more than the stores (and ``object.__new__`` more than a
    class call without one).  Then ``try: await hooks[0](*args, chain)`` with
    ``finally: chain.open = False``, so that a kept ``call_next`` refuses to run once the
    chain is over.  ``args`` are what every hook receives before ``call_next``; past the
    last hook, ``end()`` gives the chain's default decision.  (The caller awaits the first
    hook directly, and the chain is that hook's ``call_next``: no coroutine layer and no
    ``call_next`` object of its own for the usual chain of one hook.)
    """

    __slots__ = ("_called", "args", "end", "hooks", "open")

    hooks: Sequence[Callable[..., Awaitable[Any]]]
    args: tuple[object, ...]
    end: Callable[[], Awaitable[Any]]
    open: bool  # the chain runs: a call_next may run the next hook
    _called: bool  # the first hook's call_next was called

    def __call__(self) -> Awaitable[Any]:
        """``call_next`` of the first hook: the second hook's coroutine (or ``end()``), once."""
        if not self.open:
            raise _closed()
        if self._called:
            raise _twice()
        self._called = True
        if len(self.hooks) == 1:
            return self.end()
        return _following(self, 1)


def _following(chain: Chain, index: int) -> Awaitable[Any]:
    """``hooks[index](*args, call_next)``, for an ``index`` short of the end."""
    following = _Next()  # no constructor of its own, as Chain: one per hook past the first
    following._chain = chain
    following._index = index + 1
    return chain.hooks[index](*chain.args, following)


def _closed() -> RuntimeError:
    return RuntimeError("call_next() called after the tool call's chain had returned")


def _twice() -> RuntimeError:
    return RuntimeError("call_next() may be called only once")


class _Next:
    """``call_next`` of a pre- or post-execute hook past the first: the next hook's
    coroutine (or the chain's ``end()``), once."""

    __slots__ = ("_chain", "_index")

    _chain: Chain
    _index: int  # of the hook it calls (``len(hooks)``: the end); -1 once called

    def __call__(self) -> Awaitable[Any]:
        chain = self._chain
        if not chain.open:
            raise _closed()
        index, self._index = self._index, -1
        if index < 0:
            raise _twice()
        if index == len(chain.hooks):
            return chain.end()
        return _following(chain, index)


async def allowed() -> PreDecision:
    """The end of a pre-execute chain of a tool without ``requires_approval``."""
    return ALLOW


async def accepted() -> PostDecision:
    """The end of every post-execute chain."""
    return ACCEPT


class ApprovalEnd:
    """The end of the pre-execute chain of a tool with ``requires_approval``: ``Ask()`` when
    it holds for the parsed arguments (a raising or non-bool callable counts as holding)."""

    __slots__ = ("_run",)

    def __init__(self, run: _Run) -> None:
        self._run = run

    async def __call__(self) -> PreDecision:
        run = self._run
        definition = run.definition
        assert definition is not None
        flag = definition.requires_approval
        if flag is True or flag is False:
            return _ASK if flag else ALLOW
        try:
            holds = flag(run.parsed)
        except Exception:
            logger.exception(
                "requires_approval of tool %r raised; asking for approval", definition.name
            )
            return _ASK
        return ALLOW if holds is False else _ASK


class AroundChain:
    """One call's around-execute chain, which is also its first wrapper's ``call_next``;
    past the last wrapper, ``dispatch(run, args)``.

    It has no ``__init__``, as :class:`Chain`: ``chain = AroundChain()``, then every field
    below set (``view`` to the call's ``ToolDispatchExecution``, ``open`` to ``True``,
    ``_called`` to ``False``).  Then ``try: await wrappers[0](view, chain)`` with
    ``finally: chain.open = False``; the caller checks what the wrapper returns (see
    :func:`checked_result`) and restores the caller's signal afterwards.  (Awaited
    directly, with the chain as the first wrapper's ``call_next``: no coroutine layer and
    no ``call_next`` object of its own for the usual chain of one wrapper.)
    """

    __slots__ = ("_called", "args", "dispatch", "open", "run", "view", "wrappers")

    wrappers: Sequence[AroundWrapper]
    run: _Run
    view: ToolDispatchExecution
    dispatch: Callable[[_Run, Any], Awaitable[ToolResult]]
    args: Any  # what dispatch passes to the body
    open: bool  # the chain runs: a call_next may run the next wrapper
    _called: bool  # the first wrapper's call_next was called

    def __call__(self) -> Awaitable[ToolResult]:
        """``call_next`` of the first wrapper: at most once, while the chain runs."""
        if not self.open:
            raise _closed()
        if self._called:
            raise _twice()
        self._called = True
        if len(self.wrappers) == 1:
            # The last wrapper's call_next is dispatch itself (which restores the signal
            # that wrapper set when it returns): no step layer in between.
            return self.dispatch(self.run, self.args)
        return self.step(1)

    async def step(self, index: int) -> ToolResult:
        """``call_next`` of wrapper ``index - 1``, for a wrapper that is not the last."""
        run = self.run
        # What the calling wrapper set for the span of its call_next(): restored when that
        # call_next() returns, so each wrapper sees its own signal again.
        signal = run.dispatch_signal
        once = _Once()  # no constructor of its own, as Chain: one per wrapper past the first
        once._chain = self
        once._index = index + 1
        try:
            return checked_result(await self.wrappers[index](self.view, once))
        finally:
            run.dispatch_signal = signal


def checked_result(result: object) -> ToolResult:
    """What an around-execute wrapper returned, which must be a :class:`ToolResult`."""
    if not isinstance(result, ToolResult):
        raise TypeError(f"around-execute wrapper returned {safe_repr(result)}, not a ToolResult")
    return result


class _Once:
    """``call_next`` of an around-execute wrapper past the first: at most once, while the
    chain runs."""

    __slots__ = ("_chain", "_index")

    _chain: AroundChain
    _index: int  # of the wrapper it calls (``len(wrappers)``: dispatch); -1 once called

    def __call__(self) -> Awaitable[ToolResult]:
        chain = self._chain
        if not chain.open:
            raise _closed()
        index, self._index = self._index, -1
        if index < 0:
            raise _twice()
        if index == len(chain.wrappers):
            return chain.dispatch(chain.run, chain.args)  # as in AroundChain.__call__
        return chain.step(index)
