"""The pipeline: what happens to one tool call, read top to bottom in :func:`run_call`.

Entry, the pre-aborted check, resolution, the gate (pre-execute, guards, approval) under
the caller's signal, the around-execute chain ending in dispatch (the body under the fused
signal, in its own nursery), post-execute, then finish and publish.  Each stage is a
function named for it, below :func:`run_call` in the order the call reaches it; the gate
lives in ``_gate``, dispatch (the body) in ``_dispatch``, post-execute and publication in
``_post``.

Nothing here keeps a reference cycle alive past the call: exceptions caught on the way are
dropped from the frames that caught them (a frame in an exception's traceback that still
holds the exception is a cycle), so reference counting frees a finished call at once.
"""

# the package's modules share underscore helpers with each other:
# pyright: reportPrivateUsage=false
# run-time validation of values from untyped callers:
# pyright: reportUnnecessaryIsInstance=false

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import trio

from ._chains import AroundChain, checked_result
from ._dispatch import dispatch
from ._execution import (
    FinalizeContent,
    ToolDefinition,
    ToolDispatchExecution,
    ToolExecution,
    _Run,
)
from ._failures import wrapper_failure
from ._gate import gate, guard
from ._json import JSONText, NotJSONError, freeze
from ._outcomes import (
    FinalResult,
    cancelled_instead,
    finish,
    not_json_result,
    with_body_contexts,
)
from ._post import post_execute, publish
from ._results import (
    INVALID_ARGS,
    UNKNOWN_TOOL,
    ToolResult,
    aborted,
    error_result,
)
from ._stages import (
    AroundWrapper,
    CallHooks,
    CallInput,
    Pipelined,
    Stages,
)
from ._util import checkpoint_due

_NOT_STARTED = object()  # the instruments' state until they have started
_new = object.__new__


async def run_call(
    registry: Pipelined, input: CallInput, _hooks: CallHooks | None = None
) -> ToolResult:
    """Run one tool call through the pipeline and return its one frozen result.

    (This is ``ToolRegistry.execute`` itself; only the batch scheduler passes ``_hooks``.)
    The same result object is published to every result observer first.  Cancellation of
    ``input.signal`` never raises: it becomes ``ABORTED`` (the body was invoked) or
    ``ABORTED_BEFORE_DISPATCH``.  Started work is always awaited: a body that ignores its
    signal keeps this call pending.

    Raises:
        trio.Cancelled: an enclosing Trio scope (not the signal) was cancelled; the result
            was published before re-raising.
        BaseException: ``KeyboardInterrupt`` and similar propagate likewise, after
            publication.
    """
    stages = registry._stages
    # 1. Entry (synchronous): token, fields read once, definition, materialisation.
    run, finalize = enter(registry._tools, stages, input)
    # Nothing reads the input past entry: a parked call does not keep it (nor the
    # arguments it carries) alive.
    del input
    run.hooks = _hooks  # underscored: not part of `execute`'s public signature
    started: object = _NOT_STARTED  # the instruments' state, once they have started
    # The try blocks below are few on purpose: an ambient cancellation's `trio.Cancelled`
    # crosses all of them, and every handler it enters runs a subclass check in Python
    # (Trio's exception classes have an ABC metaclass), about 0.3 us each.
    try:
        if stages.instruments is not None:
            # The view every instrument sees, made here (what `run.execution()` does, one
            # method call fewer on every instrumented call); finish reads it back.
            # (`view`, the local the end reads it back into: a slot fewer in the frame.)
            view: Any = object.__new__(ToolExecution)
            run._execution = view
            view._run = run
            try:
                started = stages.instruments.start(view)
            except (Exception, trio.Cancelled):  # a Cancelled from it is stray: logged
                started = stages.instruments.start_failed()
            if started is not None:
                started = stages.instruments.enter(started)
        await trio.lowlevel.checkpoint_if_cancelled()
        # 1-2. Materialisation failure, then a pre-aborted caller: final, no stage runs
        # (not even post-execute).
        if run.decided is not None:
            raise FinalResult(run.decided)
        if run.caller_signal._reason is not None:  # `.cancelled`, without the call
            raise FinalResult(aborted(body_invoked=False))
        # 3. Unknown tool / invalid arguments skip straight to post-execute.
        args, result = resolve(run)
        # Resolved whenever ``result`` is None (no run-time cast on this path).
        definition: Any = run.definition
        # 4. The gate: pre-execute chain, guards, approval, under the caller's signal.
        if result is None:
            if stages.pre or definition.requires_approval is not False:
                result = await gate(run)
            elif stages.guards:  # guards alone wait for nothing: no scope, no coroutine
                result = guard(run)
        # 5. The around-execute chain, ending in dispatch of the body.
        if result is None:
            wrappers = stages.around if definition.timeout is None else stages.around_timed
            if not wrappers:
                step = dispatch(run, args)  # a coroutine: nothing of it runs before `await`
            elif wrappers is stages.policy_alone:
                # The timeout policy alone (a timed tool, no wrapper of the user's) needs
                # no chain: dispatch applies it itself.
                step = dispatch(run, args, True)  # timed (positional: cheaper than a keyword)
            else:
                step = around_execute(run, args, wrappers)
            if _hooks is None:  # the usual case: no try block around the chain
                result = await step
            else:
                _hooks.gate_passed()
                try:
                    result = await step
                finally:
                    if _hooks.holds_slot:
                        _hooks.dispatch_settled()
            if not result.is_error:
                # Ambient cancellation swallowed by a stage re-raises here (see `decided`).
                if checkpoint_due():
                    run.decided = cancelled_instead(run, result)
                    await trio.lowlevel.checkpoint_if_cancelled()
                    run.decided = None
                if run.caller_signal._reason is not None:
                    result = cancelled_instead(run, result)
        # 6. Post-execute, then cancellation that arrived while it waited.
        if stages.post:
            result = await post_execute(run, result)
            if not result.is_error:
                if checkpoint_due():  # as above
                    run.decided = cancelled_instead(run, result)
                    await trio.lowlevel.checkpoint_if_cancelled()
                    run.decided = None
                if run.caller_signal._reason is not None:
                    result = cancelled_instead(run, result)
    except FinalResult as final:
        result = final.result
    except BaseException:
        # Ambient cancellation or KeyboardInterrupt: the call still gets its one result.
        await abandon(run, finalize, started)
        raise
    # 7. Finish: snapshot, finalize_content, freeze.  Skipped when it has nothing to do
    # (no finalize_content, meta, halt or conclusion): it would return the result as is.
    try:
        if not run.body_invoked:
            # The body's nursery's exit was the schedule point on the dispatch path; every
            # other path still owes the caller one.
            await trio.lowlevel.cancel_shielded_checkpoint()
        if (
            finalize is not None
            or result.meta is not None
            or run.halt is not None
            or run.concludes
            or result.concludes_turn
        ):
            # finalize_content is called once: what it raises leads to the fallback
            # without it.
            once, finalize = finalize, None
            result = finish(run, result, once)
    except BaseException:
        await abandon(run, finalize, started)
        raise
    # Publish the same object that is returned.
    if _hooks is not None:
        _hooks.published = result
    try:
        if stages.instruments is not None:
            view = run._execution  # made at entry, the one every stage saw
            if started is None:  # one instrument, no context manager: the usual case
                try:
                    stages.instruments.finished(view, result)
                except (Exception, trio.Cancelled):
                    stages.instruments.finish_failed()
            else:
                stages.instruments.finish(started, view, result)
    finally:
        # Also after an instrument's KeyboardInterrupt: the observers still get the one
        # result (as in `abandon`).
        if stages.observers:
            await publish(run, result)
        # The call is over: drop the run's view, which refers back to the run, so that
        # reference counting frees the call's objects now rather than the cyclic GC later.
        run._execution = None
    return result


async def abandon(run: _Run, finalize: FinalizeContent | None, started: object) -> None:
    """Give a call that is about to raise (ambient cancellation, ``KeyboardInterrupt``) its
    one result all the same: the result decided at entry or ``ABORTED*``, finished,
    reported to the hooks and instruments, and published."""
    fallback = run.decided
    # What finalize_content raises past Exception (KeyboardInterrupt...): raised once the
    # call's one result (without finalize_content's say) is published, like the finish
    # step's own.
    interrupt: BaseException | None = None
    if fallback is None:
        fallback = aborted(
            body_invoked=run.body_invoked, additional_contexts=run.body_contexts, halt=run.halt
        )
        # Made from the run's own halt, an error (so concluding nothing) without meta:
        # `finish` would return it as it is, unless finalize_content has its say.
        if finalize is not None:
            try:
                fallback = finish(run, fallback, finalize)
            except BaseException as exc:
                interrupt = exc
    else:
        try:
            fallback = finish(run, fallback, finalize)
        except BaseException as exc:
            interrupt = exc
            fallback = finish(run, fallback, None)
    hooks: CallHooks | None = run.hooks
    if hooks is not None:
        hooks.published = fallback
    stages: Stages = run.stages
    try:
        if stages.instruments is not None and started is not _NOT_STARTED:
            stages.instruments.finish(started, run.execution(), fallback)
    finally:
        # Also after an instrument's KeyboardInterrupt (which then replaces the exception
        # the call was raising).
        if stages.observers:
            await publish(run, fallback)
        run._execution = None  # see the end of run_call
    if interrupt is not None:
        # Raised from a temporary pair while the local is cleared (see dispatch): this
        # frame, in the traceback, must not keep the exception.
        raise (interrupt, interrupt := None)[0]


def report_synthetic(
    tools: Mapping[str, ToolDefinition[Any]],
    stages: Stages,
    input: CallInput,
    result: ToolResult,
) -> None:
    """Give the instruments a result the batch scheduler made for a call it never
    started, with the view the call would have had."""
    instruments = stages.instruments
    if instruments is not None:
        instruments.report(enter(tools, stages, input)[0].execution(), result)


def enter(
    tools: Mapping[str, ToolDefinition[Any]], stages: Stages, input: CallInput
) -> tuple[_Run, FinalizeContent | None]:
    """Entry: read each field once, resolve the definition, materialise the arguments.

    The token and the read-only view are created on first use: both are per call and
    compared by identity, so creating them lazily is unobservable.
    """
    name = input.name
    definition = tools.get(name)
    run = _Run(
        input.call_id,
        name,
        input.signal,
        input.agent,
        input.parent,
        input.on_progress,
        definition,
    )
    run.stages = stages
    arguments = input.arguments
    try:
        if type(arguments) is JSONText:
            run.arguments, run.arguments_error = arguments.parse()
        else:  # `materialise`, inline: every call takes this path
            run.arguments = freeze(arguments)
    except NotJSONError as exc:
        run.decided = not_json_result("execution arguments", exc)
    return run, definition.finalize_content if definition is not None else None


def resolve(run: _Run) -> tuple[Any, ToolResult | None]:
    definition = run.definition
    if definition is None:
        return None, error_result("ToolNotFoundError", UNKNOWN_TOOL, f'unknown tool "{run.name}"')
    arguments = run.arguments
    if definition.args is None:  # a raw tool: the arguments as they are (unparsed text too)
        run.parsed = arguments
        return arguments, None
    if run.arguments_error is not None:  # JSON text that did not parse
        return None, error_result(
            "ToolArgsError", INVALID_ARGS, f"invalid arguments: {run.arguments_error}"
        )
    args, violations = definition._parse(arguments)
    if violations:
        return None, error_result(
            "ToolArgsError", INVALID_ARGS, f"invalid arguments: {'; '.join(violations)}"
        )
    run.parsed = args
    return args, None


async def around_execute(run: _Run, args: Any, wrappers: tuple[AroundWrapper, ...]) -> ToolResult:
    """The around-execute chain; its end is dispatch.  A raising wrapper is final."""
    chain = AroundChain()  # no constructor of its own (see AroundChain)
    chain.wrappers = wrappers
    chain.run = run
    # ``ToolDispatchExecution._create(run)`` without the metaclass call (per call).
    view = chain.view = _new(ToolDispatchExecution)
    view._run = run
    chain.dispatch = dispatch
    chain.args = args
    chain.open = True
    chain._called = False
    try:
        try:
            value = await wrappers[0](view, chain)
        finally:
            chain.open = False  # a call_next kept past the chain refuses to run
        # The exact type needs no call; anything else is checked.
        result = value if type(value) is ToolResult else checked_result(value)
    except (Exception, trio.Cancelled) as exc:
        raise FinalResult(wrapper_failure(exc)) from None
    finally:
        run.dispatch_signal = run.caller_signal
    return with_body_contexts(run, result) if run.body_contexts else result
