"""After dispatch: the post-execute chain, and the publication of the one final result.

Both are steps of the pipeline (``_pipeline.run_call``), in the order the call reaches them.
"""

# the package's modules share underscore helpers with each other:
# pyright: reportPrivateUsage=false
# run-time validation of values from untyped callers:
# pyright: reportUnnecessaryIsInstance=false

from __future__ import annotations

import inspect

import trio

from ._chains import ACCEPT, Chain, accepted
from ._decisions import Accept, Block
from ._execution import _Run
from ._failures import exception_result, stray_or_raise
from ._outcomes import FinalResult
from ._results import (
    BLOCKED,
    POST_EXECUTE_FAILED,
    ContentBlock,
    ErrorInfo,
    TextBlock,
    ToolResult,
    make_result,
    replace_result,
)
from ._stages import PostExecuteHook, ResultObserver
from ._util import logger, safe_repr


async def post_execute(run: _Run, result: ToolResult) -> ToolResult:
    """The post-execute chain: ``Accept`` amends the result, ``Block`` replaces it."""
    hooks: tuple[PostExecuteHook, ...] = run.stages.post
    try:
        # The view made by an earlier stage, if any, without the method call.
        execution = run._execution or run.execution()
        chain = Chain()  # no constructor of its own (see Chain)
        chain.hooks = hooks
        chain.args = (execution, result)
        chain.end = accepted
        chain.open = True
        chain._called = False
        try:
            decision: object = await hooks[0](execution, result, chain)
        finally:
            chain.open = False
        if decision is ACCEPT:  # the chain's end, passed on: keeps the result as it is
            return result
        if not isinstance(decision, (Accept, Block)):  # a tuple: cheaper than a union
            raise TypeError(
                f"post-execute chain returned {safe_repr(decision)}; expected Accept() or Block()"
            )
    except Exception as exc:
        raise FinalResult(exception_result(exc, POST_EXECUTE_FAILED)) from None
    except trio.Cancelled as exc:
        stray = stray_or_raise(exc)
        raise FinalResult(exception_result(stray, POST_EXECUTE_FAILED)) from None
    halt = result.halt if result.halt is not None else decision.halt
    if isinstance(decision, Block):
        feedback = decision.feedback
        if isinstance(feedback, str):
            content: tuple[ContentBlock, ...] = (TextBlock(feedback),)
            message = feedback
        else:
            content = feedback
            message = "\n".join(b.text for b in feedback if isinstance(b, TextBlock))
        return make_result(
            content,
            is_error=True,
            error=ErrorInfo(
                "ToolBlockedError",
                BLOCKED,
                message or "tool result blocked by post-execute policy",
            ),
            additional_contexts=decision.additional_contexts,
            halt=halt,
        )
    if decision.content is None and not decision.additional_contexts and halt is result.halt:
        return result
    return replace_result(
        result,
        content=result.content if decision.content is None else decision.content,
        additional_contexts=result.additional_contexts + decision.additional_contexts,
        halt=halt,
    )


async def publish(run: _Run, result: ToolResult) -> None:
    """Give the one final result to every observer.

    An observer's ``Exception`` (or stray ``trio.Cancelled``: observers run shielded or
    synchronously, so none is ever legitimate) is logged.  A ``KeyboardInterrupt`` or
    other ``BaseException`` does not stop the later observers from seeing the result:
    the first one is re-raised once every observer ran.
    """
    observers: tuple[ResultObserver, ...] = run.stages.observers
    execution = run._execution or run.execution()  # as in post_execute
    fatal: BaseException | None = None
    for observer in observers:
        try:
            outcome = observer(execution, result)
            if outcome is not None and inspect.isawaitable(outcome):
                # Observers are bookkeeping, not work: a cancelled caller must still
                # record the one authoritative result.  (A synchronous observer cannot
                # be interrupted, so only an awaitable needs the shield.)
                with trio.CancelScope(shield=True):
                    await outcome
        except (Exception, trio.Cancelled):
            logger.exception("result observer %s raised", safe_repr(observer))
        except BaseException as exc:
            if fatal is None:
                fatal = exc
    if fatal is not None:
        raise fatal
