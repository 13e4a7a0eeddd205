"""A reusable state machine checking a user's registry against the cancellation contract.

The user's tools and hooks are opaque, so the machine cannot predict their results.  It
checks what the contract guarantees whatever they do, placing cancellation with *probes*:
a pre-execute hook, an around-execute wrapper and a post-execute hook registered after the
user's (so innermost), plus a canceller task that fires once the body is blocked.  The
probe wrapper also tells exactly whether the body was invoked: dispatch invokes it iff
neither the caller's signal nor the wrapper's ``exec.signal`` has fired when its
``call_next()`` runs (nothing can run in between), and a sync body iff its worker thread
then got a token of the registry's thread limiter.
"""

# the package's modules share underscore helpers with each other:
# pyright: reportPrivateUsage=false

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final, Literal, cast, final, get_args

import attrs
import trio
import trio.testing
from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from .._decisions import PostDecision, PreDecision
from .._derived import open_signal
from .._execution import ToolDispatchExecution, ToolExecution
from .._input import ToolExecutionInput
from .._registry import ToolRegistry
from .._results import NOT_JSON, TOOL_ABORTED, TOOL_ABORTED_BEFORE_DISPATCH, ToolResult
from .._signal import CancelSource
from ._threads import ThreadsHoldTheClock

__all__ = [
    "CallPlan",
    "ContractHow",
    "ContractWhere",
    "call_plans",
    "cancellation_contract_machine",
]

ContractWhere = Literal[
    "never",
    "before_entry",
    "pre_execute",
    "wrapper_before",
    "body",
    "wrapper_after",
    "post_execute",
    "after_delay",
]
"""Where the contract machine cancels (see :class:`CallPlan`)."""
ContractHow = Literal["signal", "ambient"]
"""How the contract machine cancels (see :class:`CallPlan`)."""

_WHERES: Final[tuple[ContractWhere, ...]] = get_args(ContractWhere)
_HOWS: Final[tuple[ContractHow, ...]] = get_args(ContractHow)
_ABORTS: Final = frozenset({TOOL_ABORTED, TOOL_ABORTED_BEFORE_DISPATCH})
# Virtual seconds after entry for "after_delay": odd values, so that they do not coincide
# with the round durations tools tend to sleep (a tie would make the order arbitrary).
_DELAYS: Final = (0.0137, 0.0971, 0.4993, 1.0007, 2.7011, 9.9973)


@final
@attrs.frozen(kw_only=True)
class CallPlan:
    """One call made by :func:`cancellation_contract_machine`.

    ``name`` and ``arguments`` go into the :class:`~trio_tools.ToolExecutionInput`.
    ``where``: ``"never"``; ``"before_entry"``; inside the machine's pre-execute probe
    (innermost, so only if the user's hooks let the call through to it); in its
    around-execute probe before or after ``call_next()``; ``"body"``: once the body (and
    everything else) is blocked, if it still runs; in its post-execute probe;
    ``"after_delay"``: ``delay`` virtual seconds after entry, whatever runs then (your own
    hooks and wrappers waiting on time included).  ``how``:
    ``"signal"`` fires the caller's source, ``"ambient"`` cancels a ``trio.CancelScope``
    around ``execute``.  ``shared``: the call uses the machine's long-lived signal (shared
    by the calls of one machine run) instead of a fresh one.
    """

    name: str
    arguments: object
    where: ContractWhere = "never"
    how: ContractHow = "signal"
    shared: bool = False
    delay: float = 0.0


def call_plans(calls: st.SearchStrategy[tuple[str, object]]) -> st.SearchStrategy[CallPlan]:
    """Plans for the calls ``calls`` draws (``(tool name, arguments)`` pairs)."""

    def build(
        call: tuple[str, object],
        where: ContractWhere,
        how: ContractHow,
        shared: bool,
        delay: float,
    ) -> CallPlan:
        if where != "after_delay":
            delay = 0.0
        return CallPlan(
            name=call[0], arguments=call[1], where=where, how=how, shared=shared, delay=delay
        )

    return st.builds(
        build,
        calls,
        st.sampled_from(_WHERES),
        st.sampled_from(_HOWS),
        st.booleans(),
        st.sampled_from(_DELAYS),
    )


@attrs.define
class _Probe:
    """What the probes saw of one call."""

    plan: CallPlan
    source: CancelSource
    outer: trio.CancelScope
    entered: list[str] = attrs.Factory(list[str])
    dispatched: bool = False
    body_settled: bool = False
    fired: bool = False  # our cancellation was triggered during the call
    decisive: bool = False  # ... and early enough that the final result must reflect it
    returned: bool = False
    dispatch_event: trio.Event = attrs.Factory(trio.Event)

    def trigger(self) -> None:
        self.fired = True
        # Once the innermost post-execute hook has run, outer hooks may still be running
        # and the result may already be final: only firing before that is decisive (the
        # post-execute probe itself fires before the registry's final check).
        self.decisive = "post" not in self.entered or self.plan.where == "post_execute"
        if self.plan.how == "signal":
            self.source.cancel("cancelled by the contract machine")
        else:
            self.outer.cancel()


@final
@attrs.frozen(kw_only=True)
class _Observed:
    plan: CallPlan
    probe: _Probe
    published: tuple[ToolResult, ...]
    returned: ToolResult | None
    escaped: BaseException | None
    has_finalize: bool
    pre_cancelled: bool
    caller_listeners: int
    leaked_tasks: int
    hung: bool


def _problems(o: _Observed) -> list[str]:
    """Every way the observed call breaks the contract."""
    problems: list[str] = []
    plan, probe = o.plan, o.probe
    if o.hung:
        return ["the call did not settle: a tool or hook ignores cancellation, or waits forever"]
    if len(o.published) != 1:
        problems.append(f"published {len(o.published)} results, expected exactly one")
    result = o.published[0] if o.published else None
    code = result.code if result is not None else None
    if o.escaped is not None:
        if not isinstance(o.escaped, trio.Cancelled):
            problems.append(f"execute raised {o.escaped!r}; only trio.Cancelled may escape")
        elif not (plan.how == "ambient" and probe.fired):
            problems.append("execute raised trio.Cancelled without ambient cancellation")
        elif not o.has_finalize and code not in (*_ABORTS, NOT_JSON):
            problems.append(f"ambient cancellation published {code}, expected an abort code")
    elif o.returned is not result:
        problems.append("the returned result is not the published one")
    if code == TOOL_ABORTED and not probe.dispatched:
        problems.append("ABORTED, but the body was never invoked")
    if code == TOOL_ABORTED_BEFORE_DISPATCH and probe.dispatched:
        problems.append("ABORTED_BEFORE_DISPATCH, but the body was invoked")
    caller_cancelled = o.pre_cancelled or (plan.how == "signal" and probe.decisive)
    if caller_cancelled and result is not None and not result.is_error:
        problems.append("the caller cancelled, yet the result is a success")
    if o.pre_cancelled or (plan.where == "before_entry" and plan.how == "signal"):
        if probe.entered or probe.dispatched:
            problems.append(f"pre-cancelled, yet stages ran: {probe.entered}")
        if not o.has_finalize and code not in (TOOL_ABORTED_BEFORE_DISPATCH, NOT_JSON):
            problems.append(f"pre-cancelled call gave {code}, expected ABORTED_BEFORE_DISPATCH")
    if o.caller_listeners:
        problems.append(f"{o.caller_listeners} listener(s) left on the caller's signal")
    if o.leaked_tasks:
        problems.append(f"{o.leaked_tasks} Trio task(s) outlived the call")
    return problems


def cancellation_contract_machine(
    make_registry: Callable[[], ToolRegistry],
    calls: st.SearchStrategy[tuple[str, object]],
    *,
    settle_within: float = 86_400.0,
) -> type[RuleBasedStateMachine]:
    """A Hypothesis state machine checking ``make_registry()``'s tools and hooks.

    Each machine run calls ``make_registry()`` once (outside Trio: create Trio primitives
    lazily) and registers its probes after yours, so they are innermost: a pre-execute hook,
    an around-execute wrapper, a post-execute hook and a result observer.  Each rule runs
    calls drawn from ``calls`` in a fresh ``trio.run`` on ``MockClock(autojump_threshold=0)``
    with cancellation placed by a :class:`CallPlan`: one call at a time, or several side by
    side sharing the machine's long-lived signal.

    Checked for every call, whatever the tools and hooks return:

    * it settles within ``settle_within`` virtual seconds;
    * exactly one result is published, and ``execute`` returns that very object;
    * ``ABORTED`` only if the body was invoked, ``ABORTED_BEFORE_DISPATCH`` only if not;
    * a caller that cancelled (before the innermost post-execute hook ran, or before the
      call) never gets a success; a
      pre-cancelled call runs no stage and gives ``ABORTED_BEFORE_DISPATCH`` (``NOT_JSON``
      for unusable arguments);
    * only a bare ``trio.Cancelled`` escapes ``execute``, only under ambient cancellation,
      after publishing an abort (``NOT_JSON``) result;
    * no listener is left on the caller's signal, none beyond its baseline on the shared
      long-lived signal, and no Trio task outlives the call.

    Checks that depend on the result's code are skipped for a tool with
    ``finalize_content``, which may legitimately rewrite it.  Stages of your own that build
    ``ABORTED`` results themselves must follow the same classification.

    Args:
        make_registry: returns the registry under test, with your tools and hooks.
        calls: ``(tool name, arguments)`` pairs to call; include unknown names and unusable
            arguments if you like.
        settle_within: virtual seconds after which a call counts as hung; make it longer
            than your slowest tool's (virtual) run time.

    Returns:
        A ``RuleBasedStateMachine`` subclass; run it with ``Machine.TestCase`` (pytest
        collects a module-level ``TestX = Machine.TestCase``).
    """
    if not callable(make_registry):
        raise TypeError(f"make_registry must be callable, got {make_registry!r}")
    plans = call_plans(calls)
    plain_plans = plans.filter(lambda p: p.how == "ambient" or not p.shared)

    class CancellationContract(RuleBasedStateMachine):
        """Calls with cancellation at every phase, checked against the contract."""

        def __init__(self) -> None:
            super().__init__()
            # Checked at run time too: untyped callers get a clear error, not an odd failure.
            registry = cast("object", make_registry())
            if not isinstance(registry, ToolRegistry):
                raise TypeError(f"make_registry() must return a ToolRegistry, got {registry!r}")
            self.registry = registry
            # Before the probes are added: adding them makes the registry take it up.
            self.threads = ThreadsHoldTheClock(registry._thread_limiter)
            registry._thread_limiter = cast("trio.CapacityLimiter", self.threads)
            self.session = CancelSource()
            self.probes: dict[str, _Probe] = {}
            self.published: dict[str, list[ToolResult]] = {}
            self.count = 0
            self.registry.add_pre_execute(self._pre_probe)
            self.registry.add_around_execute(self._around_probe)
            self.registry.add_post_execute(self._post_probe)
            self.registry.add_observer(self._observer)

        # -- probes (innermost stages) ---------------------------------------------------

        async def _pre_probe(
            self, exec: ToolExecution, call_next: Callable[[], Awaitable[PreDecision]]
        ) -> PreDecision:
            probe = self.probes[exec.call_id]
            probe.entered.append("pre")
            if probe.plan.where == "pre_execute":
                probe.trigger()
                await trio.lowlevel.checkpoint()
            return await call_next()

        async def _around_probe(
            self, exec: ToolDispatchExecution, call_next: Callable[[], Awaitable[ToolResult]]
        ) -> ToolResult:
            probe = self.probes[exec.call_id]
            probe.entered.append("wrapper")
            if probe.plan.where == "wrapper_before":
                probe.trigger()
                await trio.lowlevel.checkpoint()
            # Dispatch fuses the two signals and invokes the body iff neither has fired;
            # nothing runs between here and that check.
            probe.dispatched = not (exec.signal.cancelled or probe.source.signal.cancelled)
            probe.dispatch_event.set()
            definition = exec.definition
            task = trio.lowlevel.current_task()
            in_thread = definition is not None and definition._sync
            self.threads.started.discard(task)
            try:
                result = await call_next()
            finally:
                probe.body_settled = True
                if in_thread and task not in self.threads.started:
                    # Cancelled while waiting for a thread token: the body never ran.
                    probe.dispatched = False
                self.threads.started.discard(task)
            if probe.plan.where == "wrapper_after":
                probe.trigger()
                await trio.lowlevel.checkpoint()
            return result

        async def _post_probe(
            self,
            exec: ToolExecution,
            result: ToolResult,
            call_next: Callable[[], Awaitable[PostDecision]],
        ) -> PostDecision:
            probe = self.probes[exec.call_id]
            probe.entered.append("post")
            if probe.plan.where == "post_execute":
                probe.trigger()
                await trio.lowlevel.checkpoint()
            return await call_next()

        def _observer(self, exec: ToolExecution, result: ToolResult) -> None:
            self.published.setdefault(exec.call_id, []).append(result)

        # -- running calls ---------------------------------------------------------------

        async def _call(self, plan: CallPlan, *, isolated: bool) -> _Observed:
            self.count += 1
            call_id = f"contract-{self.count}"
            source = self.session if plan.shared else CancelSource()
            probe = _Probe(plan=plan, source=source, outer=trio.CancelScope())
            self.probes[call_id] = probe
            pre_cancelled = source.signal.cancelled
            definition = self.registry.get(plan.name)
            has_finalize = definition is not None and definition.finalize_content is not None
            call = ToolExecutionInput(
                call_id=call_id, name=plan.name, arguments=plan.arguments, signal=source.signal
            )
            baseline = trio.lowlevel.current_statistics().tasks_living
            returned: ToolResult | None = None
            escaped: BaseException | None = None
            with trio.move_on_after(settle_within) as guard:
                async with trio.open_nursery() as nursery:
                    if plan.where == "body":
                        nursery.start_soon(self._cancel_while_body_blocked, probe)
                    if plan.where == "after_delay":
                        nursery.start_soon(self._cancel_after_delay, probe)
                    if plan.where == "before_entry":
                        probe.trigger()
                    with probe.outer:
                        try:
                            returned = await self.registry.execute(call)
                        except BaseException as exc:
                            # Recorded and checked against the contract, not re-raised: only
                            # probe.outer (ours) can have been cancelled here.
                            escaped = exc
                        finally:
                            probe.returned = True
                    nursery.cancel_scope.cancel()
            del self.probes[call_id]
            return _Observed(
                plan=plan,
                probe=probe,
                published=tuple(self.published.pop(call_id, ())),
                returned=returned,
                escaped=escaped,
                has_finalize=has_finalize,
                pre_cancelled=pre_cancelled,
                caller_listeners=0 if plan.shared else source.signal.statistics().listeners,
                leaked_tasks=(
                    trio.lowlevel.current_statistics().tasks_living - baseline if isolated else 0
                ),
                # Not cancelled_caught: the guard's Cancelled was recorded as `escaped`.
                hung=guard.cancel_called,
            )

        @staticmethod
        async def _cancel_after_delay(probe: _Probe) -> None:
            await trio.sleep(probe.plan.delay)
            if not probe.returned:
                probe.trigger()

        @staticmethod
        async def _cancel_while_body_blocked(probe: _Probe) -> None:
            await probe.dispatch_event.wait()
            if not probe.dispatched:
                return
            await trio.testing.wait_all_tasks_blocked()
            if not probe.body_settled:
                probe.trigger()

        def _check(self, observed: _Observed) -> None:
            plan = observed.plan
            result = observed.published[0] if observed.published else None
            event(f"where={plan.where} how={plan.how} fired={observed.probe.fired}")
            event(f"code={result.code if result is not None else 'none'}")
            problems = _problems(observed)
            if problems:
                raise AssertionError("\n  ".join([f"{plan!r}:", *problems]))

        async def _start_timers(self) -> None:
            # The deadline timer service is a system task started on first use: start it
            # before any task baseline is taken.
            async with open_signal(timeout=1.0):
                pass

        def _run(self, fn: Callable[[], Awaitable[None]]) -> None:
            async def main() -> None:
                await self._start_timers()
                await fn()

            clock = trio.testing.MockClock(autojump_threshold=0)
            self.threads.clock = clock
            try:
                trio.run(main, clock=clock)
            finally:
                self.threads.clock = None

        @rule(plan=plans)
        def call(self, plan: CallPlan) -> None:
            """One call, alone in its Trio run."""

            async def one() -> None:
                self._check(await self._call(plan, isolated=True))

            self._run(one)

        @rule(batch=st.lists(plain_plans, min_size=2, max_size=4))
        def calls_side_by_side(self, batch: list[CallPlan]) -> None:
            """Several calls at once; shared ones all use the long-lived signal."""

            async def side_by_side() -> None:
                baseline = trio.lowlevel.current_statistics().tasks_living
                observed: list[_Observed] = []

                async def one(plan: CallPlan) -> None:
                    observed.append(await self._call(plan, isolated=False))

                async with trio.open_nursery() as nursery:
                    for plan in batch:
                        nursery.start_soon(one, plan)
                for item in observed:
                    self._check(item)
                leaked = trio.lowlevel.current_statistics().tasks_living - baseline
                assert leaked == 0, f"{leaked} Trio task(s) outlived the calls {batch!r}"

            self._run(side_by_side)

        @precondition(lambda self: self.session.signal.cancelled)
        @rule()
        def start_a_new_session(self) -> None:
            """The long-lived signal was cancelled: later shared calls get a fresh one."""
            self.session = CancelSource()

        @invariant()
        def no_listener_left_on_the_long_lived_signal(self) -> None:
            """Listener hygiene: the shared signal is back to no listeners between rules."""
            listeners = self.session.signal.statistics().listeners
            assert listeners == 0, f"{listeners} listener(s) left on the long-lived signal"

    return CancellationContract
