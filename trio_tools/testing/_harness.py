"""Run a :class:`~trio_tools.testing.Scenario` against a real registry and check it.
The scripted stages make every cancellation point deterministic: a stage triggers the
cancellation itself (or lets a canceller task do it once the stage is blocked), then waits
``WAIT`` virtual seconds on Trio's clock, so under ``MockClock(autojump_threshold=0)`` the
outcome is exact and the model in ``_scenario.py`` can predict it.
"""

# the harness reads a registry setting it must match:
# pyright: reportPrivateUsage=false

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Final, final

import attrs
import trio
import trio.testing

from .._decisions import (
    Accept,
    Allow,
    ApprovalAnswer,
    ApprovalRequest,
    Ask,
    Block,
    Deny,
    PostDecision,
    PreDecision,
)
from .._derived import open_signal
from .._execution import ToolDefinition, ToolDispatchExecution, ToolExecution, ToolRunContext
from .._input import ToolExecutionInput
from .._registry import Registration, ToolRegistry
from .._results import ContentBlock, TextBlock, ToolResult
from .._signal import CancelSignal, CancelSource
from .._timeout import timeout_policy
from ._model import expected_outcome
from ._scenario import (
    BLOCK_CONTEXT,
    BLOCK_FEEDBACK,
    BODY_CONTEXT,
    CANCEL_DENY_REASON,
    CODED,
    DENY_REASON,
    FAILURE_MESSAGES,
    GUARD_REASON,
    POST_CONTEXT,
    REPLACED_TEXT,
    SHORT_CIRCUIT_TEXT,
    SUCCESS_TEXT,
    TIMEOUT,
    TOOL_NAME,
    UNKNOWN_NAME,
    WAIT,
    WRAPPER_CONTEXT,
    CancelWhere,
    Expectation,
    Scenario,
)

__all__ = ["ScenarioRun", "check_scenario", "run_scenario", "run_scenario_sync"]

#: Virtual seconds after which a call that has not settled counts as hung.
_HANG_AFTER: Final = 1_000_000.0


class ScriptedFailure(Exception):
    """What a scripted stage raises (with ``code`` in ``coded_errors`` scenarios)."""

    def __init__(self, message: str, code: str | None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


@final
@attrs.frozen(kw_only=True)
class ScenarioRun:
    """What happened when a :class:`Scenario` ran (see :func:`run_scenario`).

    ``published`` holds every result the observers saw for the call, ``returned`` what
    ``execute`` returned (``None`` if it raised), ``escaped`` a description of what it raised
    (``"Cancelled"`` for a bare ``trio.Cancelled``), ``stages`` the scripted stages entered
    in order, ``children_running`` how many tasks started with ``ctx.start_soon`` were still
    running when ``execute`` returned or raised, ``leaked_listeners`` the listeners left on
    the caller's and the wrapper's signals beyond their baselines, ``leaked_tasks`` Trio
    tasks left beyond the baseline, ``hung`` whether the call failed to settle.
    """

    published: tuple[ToolResult, ...]
    returned: ToolResult | None
    escaped: str | None
    stages: tuple[str, ...]
    finalize_calls: int
    triggered: bool
    children_running: int
    leaked_listeners: int
    leaked_tasks: int
    hung: bool


class _Recorder:
    def __init__(self) -> None:
        self.stages: list[str] = []
        self.published: list[ToolResult] = []
        self.finalize_calls = 0
        self.triggered = False
        self.children_running = 0


def _escaped(exc: BaseException) -> str:
    if isinstance(exc, trio.Cancelled):
        return "Cancelled"
    return f"{type(exc).__name__}: {exc!r}"


async def run_scenario(
    scenario: Scenario,
    *,
    registry: ToolRegistry | None = None,
    source: CancelSource | None = None,
    isolated: bool = True,
) -> ScenarioRun:
    """Run ``scenario`` once, inside the current Trio run (use a ``MockClock``).

    Args:
        scenario: what to script.
        registry: a registry to reuse; it must have no stages or tool named ``"probe"`` of
            its own (the scenario's are registered for the call and removed afterwards).
            ``None`` makes a fresh one.
        source: the caller's source, e.g. a long-lived one shared by several calls; the
            scenario's ``"signal"`` cancellation fires it.  ``None`` makes a fresh one (fired
            first when ``scenario.pre_cancelled``).
        isolated: whether the call runs alone in this Trio run.  Only then are the Trio tasks
            and the listeners on ``source``'s signal counted against a baseline: calls run
            side by side (``isolated=False``) check those once they have all settled.
    """
    if registry is None:
        registry = ToolRegistry(enforce_timeouts=scenario.enforce_timeouts)
    elif registry._enforce_timeouts != scenario.enforce_timeouts:
        raise ValueError("scenario.enforce_timeouts must match the registry's enforce_timeouts")
    if source is None:
        source = CancelSource()
        if scenario.pre_cancelled:
            source.cancel("cancelled before the call")
    if source.signal.cancelled != scenario.pre_cancelled:
        raise ValueError("scenario.pre_cancelled must say whether the caller's signal has fired")
    caller = source.signal
    own = CancelSource()
    outer = trio.CancelScope()
    reached = trio.Event()
    fired = trio.Event()
    record = _Recorder()
    code = CODED if scenario.coded_errors else None

    def fail(stage: str) -> ScriptedFailure:
        return ScriptedFailure(FAILURE_MESSAGES[stage], code)

    def trigger() -> None:
        record.triggered = True
        how = scenario.how
        if how == "signal":
            source.cancel("scripted cancellation")
        elif how == "wrapper_signal":
            own.cancel("the wrapper's own cancellation")
        elif how == "ambient":
            outer.cancel()

    async def wait(bound: CancelSignal | None) -> None:
        if bound is None:
            await trio.sleep(WAIT)
        else:
            with bound.open_scope():
                await trio.sleep(WAIT)

    async def fire() -> None:
        """Trigger the cancellation, from this task or (external) from the canceller."""
        if not scenario.external:
            trigger()
            return
        reached.set()
        # Blocked until the canceller task has fired, so the cancellation comes from another
        # task at a known moment: the wait that follows may well not block at all (its
        # scope already cancelled), and the canceller must not fire at some later point.
        # Shielded because this handshake is the harness's, not part of the scenario.
        with trio.CancelScope(shield=True):
            await fired.wait()

    async def point(where: CancelWhere, bound: CancelSignal | None = None) -> None:
        """The cancellation point: trigger, then (maybe) wait."""
        if scenario.where != where:
            return
        await fire()
        if scenario.wait:
            await wait(bound)

    async def canceller() -> None:
        await reached.wait()
        trigger()
        fired.set()

    # -- the scripted stages --------------------------------------------------------------

    async def pre_hook(
        exec: ToolExecution, call_next: Callable[[], Awaitable[PreDecision]]
    ) -> PreDecision:
        record.stages.append("pre")
        await trio.lowlevel.checkpoint()
        await point("pre_execute")
        kind = scenario.pre
        if kind == "raise":
            raise fail("pre")
        if kind == "cancel_then_deny":
            source.cancel("cancelled by the pre-execute hook")
            return Deny(CANCEL_DENY_REASON)
        if kind == "deny":
            return Deny(DENY_REASON)
        if kind == "ask":
            return Ask("scripted approval")
        decision = await call_next()
        assert isinstance(decision, Allow)
        return decision

    def guard(exec: ToolExecution) -> str | None:
        record.stages.append("guard")
        if scenario.guard == "raise":
            raise fail("guard")
        return GUARD_REASON if scenario.guard == "deny" else None

    async def approver(request: ApprovalRequest) -> ApprovalAnswer:
        record.stages.append("approver")
        await trio.lowlevel.checkpoint()
        await point("approval")
        kind = scenario.approver
        if kind == "raise":
            raise fail("approver")
        assert kind in ("granted", "rejected", "cancelled")
        return kind

    async def wrapper(
        exec: ToolDispatchExecution, call_next: Callable[[], Awaitable[ToolResult]]
    ) -> ToolResult:
        record.stages.append("wrapper")
        await trio.lowlevel.checkpoint()
        await point("wrapper_before", exec.signal)
        kind = scenario.wrapper
        if kind == "raise_before":
            raise fail("wrapper")
        if kind == "short_circuit":
            return ToolResult(
                content=(TextBlock(SHORT_CIRCUIT_TEXT),), additional_contexts=(WRAPPER_CONTEXT,)
            )
        if kind == "replace_signal" or scenario.where == "replacement":
            # A lexical narrowing: follows exec.signal and the wrapper's own source.
            async with open_signal(exec.signal, own.signal) as narrowed:
                exec.signal = narrowed
                await point("replacement")
                result = await call_next()
                await point("wrapper_after", exec.signal)
        else:
            result = await call_next()
            await point("wrapper_after", exec.signal)
        if kind == "raise_after":
            raise fail("wrapper")
        if kind == "replace_result":
            return ToolResult(
                content=(TextBlock(REPLACED_TEXT),), additional_contexts=(WRAPPER_CONTEXT,)
            )
        return attrs.evolve(
            result, additional_contexts=(*result.additional_contexts, WRAPPER_CONTEXT)
        )

    async def child(ctx: ToolRunContext) -> None:
        record.stages.append("child")
        record.children_running += 1
        try:
            await trio.lowlevel.checkpoint()
            await point("body")
        finally:
            record.children_running -= 1

    async def body(args: object, ctx: ToolRunContext) -> str:
        record.stages.append("body")
        ctx.defer_context(BODY_CONTEXT)
        kind = scenario.body
        if kind == "raise_on_cancel":
            try:
                await trio.lowlevel.checkpoint()
                if scenario.where == "body":
                    await point("body")
                    if not scenario.wait:
                        await trio.lowlevel.checkpoint()
            except trio.Cancelled:
                raise fail("body_on_cancel") from None
            return SUCCESS_TEXT
        await trio.lowlevel.checkpoint()
        if kind == "shielded":
            if scenario.where == "body":
                await fire()
            # An uncooperative stretch: it ignores every cancellation until it is done.
            with trio.CancelScope(shield=True):
                await trio.sleep(WAIT)
            return SUCCESS_TEXT
        if kind == "child":
            ctx.start_soon(child, ctx)
            return SUCCESS_TEXT
        await point("body")
        if kind == "raise":
            raise fail("body")
        return SUCCESS_TEXT

    async def post_hook(
        exec: ToolExecution,
        result: ToolResult,
        call_next: Callable[[], Awaitable[PostDecision]],
    ) -> PostDecision:
        record.stages.append("post")
        await trio.lowlevel.checkpoint()
        await point("post_execute", exec.signal)
        kind = scenario.post
        if kind == "raise":
            raise fail("post")
        if kind == "block":
            return Block(BLOCK_FEEDBACK, additional_contexts=(BLOCK_CONTEXT,))
        decision = await call_next()
        assert isinstance(decision, Accept)
        return Accept(additional_contexts=(POST_CONTEXT,))

    def finalize(exec: ToolExecution, result: ToolResult) -> Sequence[ContentBlock] | None:
        record.finalize_calls += 1
        if scenario.finalize_raises:
            raise fail("finalize")
        return None

    def observer(exec: ToolExecution, result: ToolResult) -> None:
        record.published.append(result)

    # -- registration and the call ----------------------------------------------------------

    definition = ToolDefinition(
        name=TOOL_NAME,
        execute=body,
        timeout=TIMEOUT if scenario.tool_timeout else None,
        finalize_content=finalize,
    )
    registrations: list[Registration] = [registry.register(definition)]
    if scenario.pre != "none":
        registrations.append(registry.add_pre_execute(pre_hook))
    if scenario.guard != "none":
        registrations.append(registry.add_guard(guard))
    if scenario.approver != "none":
        registrations.append(registry.set_approver(approver))
    if scenario.timeout_policy == "outer":
        registrations.append(registry.add_around_execute(timeout_policy()))
    if scenario.wrapper != "none":
        registrations.append(registry.add_around_execute(wrapper))
    if scenario.timeout_policy == "inner":
        registrations.append(registry.add_around_execute(timeout_policy()))
    if scenario.post != "none":
        registrations.append(registry.add_post_execute(post_hook))
    registrations.append(registry.add_observer(observer))

    arguments: object = (
        {"path": "notes.txt", "limits": [1, 2.5, None, True]}
        if scenario.arguments == "json"
        else {"path": {"a", "set"}}
    )
    call = ToolExecutionInput(
        call_id="call-1",
        name=TOOL_NAME if scenario.tool == "known" else UNKNOWN_NAME,
        arguments=arguments,
        signal=caller,
    )

    # Start the deadline timer service (a system task) before taking the task baseline.
    async with open_signal(timeout=1.0):
        pass
    caller_baseline = caller.statistics().listeners
    task_baseline = trio.lowlevel.current_statistics().tasks_living
    returned: ToolResult | None = None
    escaped: str | None = None
    children_running = 0
    try:
        with trio.move_on_after(_HANG_AFTER) as hang_guard:
            async with trio.open_nursery() as nursery:
                if scenario.external:
                    nursery.start_soon(canceller)
                if scenario.where == "before_entry":
                    trigger()
                with outer:
                    try:
                        returned = await registry.execute(call)
                    except BaseException as exc:
                        # Recorded, not re-raised: the harness reports it against the model.
                        # Only ``outer`` (ambient) can have cancelled anything here.
                        escaped = _escaped(exc)
                    finally:
                        children_running = record.children_running
                nursery.cancel_scope.cancel()
    finally:
        for registration in reversed(registrations):
            registration()
    return ScenarioRun(
        published=tuple(record.published),
        returned=returned,
        escaped=escaped,
        stages=tuple(record.stages),
        finalize_calls=record.finalize_calls,
        triggered=record.triggered,
        children_running=children_running,
        leaked_listeners=own.signal.statistics().listeners
        + (caller.statistics().listeners - caller_baseline if isolated else 0),
        leaked_tasks=(
            trio.lowlevel.current_statistics().tasks_living - task_baseline if isolated else 0
        ),
        # cancel_called, not cancelled_caught: the guard's Cancelled may have been recorded
        # (and swallowed) above as what execute raised.
        hung=hang_guard.cancel_called,
    )


def run_scenario_sync(
    scenario: Scenario,
    *,
    registry: ToolRegistry | None = None,
    source: CancelSource | None = None,
) -> ScenarioRun:
    """:func:`run_scenario` in its own ``trio.run`` with ``MockClock(autojump_threshold=0)``."""
    return trio.run(
        lambda: run_scenario(scenario, registry=registry, source=source),
        clock=trio.testing.MockClock(autojump_threshold=0),
    )


def check_scenario(scenario: Scenario, run: ScenarioRun) -> Expectation:
    """Compare ``run`` with :func:`expected_outcome` and the invariants every call keeps.

    Invariants: exactly one published result, and the returned result *is* it; ``execute``
    raises a bare ``trio.Cancelled`` exactly when the model says so, and nothing else; no
    task started by the body outlives the call; no listener is left on the caller's signal
    or the wrapper's replacement source; no Trio task is leaked; the call settles.

    Returns:
        The expectation, when everything matched.

    Raises:
        AssertionError: listing every mismatch, with the scenario.
    """
    expected = expected_outcome(scenario)
    problems: list[str] = []
    if run.hung:
        problems.append("the call did not settle")
    if len(run.published) != 1:
        problems.append(f"published {len(run.published)} results, expected exactly one")
    published = run.published[0] if run.published else None
    if expected.raises_cancelled:
        if run.escaped != "Cancelled":
            problems.append(
                f"execute should re-raise trio.Cancelled, got {run.escaped or 'a return'}"
            )
    elif run.escaped is not None:
        problems.append(f"execute raised {run.escaped}, expected a return")
    elif run.returned is not published:
        problems.append("the returned result is not the published one")
    if published is not None and published != expected.result:
        problems.append(f"published {published!r}\n    expected {expected.result!r}")
    if run.stages != expected.stages:
        problems.append(f"stages entered {run.stages}, expected {expected.stages}")
    if run.finalize_calls != expected.finalize_calls:
        problems.append(
            f"finalize_content ran {run.finalize_calls} times, expected {expected.finalize_calls}"
        )
    if run.triggered != expected.triggered:
        problems.append(
            f"cancellation point reached: {run.triggered}, expected {expected.triggered}"
        )
    if run.children_running:
        problems.append(f"{run.children_running} task(s) started by the body outlived the call")
    if run.leaked_listeners:
        problems.append(f"{run.leaked_listeners} listener(s) left on long-lived signals")
    if run.leaked_tasks:
        problems.append(f"{run.leaked_tasks} Trio task(s) leaked")
    if problems:
        raise AssertionError("\n  ".join([f"{scenario!r}:", *problems]))
    return expected
