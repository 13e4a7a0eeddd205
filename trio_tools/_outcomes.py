"""What a call's stages produce, turned into candidate results.

Small pure helpers of the pipeline: a body's return value or failure as a result, the
registry's own denials and not-JSON errors, the entry's materialisation of the arguments,
the rule that the body's deferred contexts always survive, and the ``ABORTED*`` result that
replaces a success once the caller's signal has fired.
"""

# the package's modules share underscore helpers with each other:
# pyright: reportPrivateUsage=false
# run-time validation of values from untyped callers:
# pyright: reportUnnecessaryIsInstance=false

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import trio

from ._execution import FinalizeContent, _Run
from ._failures import StrayCancelled, exception_result, failures_result
from ._json import JSONText, NestingTooDeepError, NotJSONError, freeze, to_compact_json
from ._results import (
    DENIED,
    FINALIZE_FAILED,
    NOT_JSON,
    TOOL_FAILED,
    AdditionalContext,
    ContentBlock,
    ImageBlock,
    TextBlock,
    ToolOutput,
    ToolResult,
    _content,
    aborted,
    error_result,
    make_result,
    replace_result,
    text_block,
    text_result,
)
from ._util import leaf_exceptions, safe_repr


def split_failure(exc: BaseException) -> tuple[list[Exception], list[BaseException]]:
    """Split an exception (group) into ordinary failures and everything else."""
    failures: list[Exception] = []
    others: list[BaseException] = []
    for leaf in leaf_exceptions(exc):
        if isinstance(leaf, Exception):
            failures.append(leaf)
        else:
            others.append(leaf)
    return failures, others


def denied(reason: str, halt: Any = None) -> ToolResult:
    return error_result("ToolDeniedError", DENIED, reason, halt=halt)


def not_json_result(what: str, exc: NotJSONError | None = None) -> ToolResult:
    message = f"tool {what} must be losslessly JSON-serializable"
    if isinstance(exc, NestingTooDeepError):
        message = f"{message}: {exc}"
    return error_result("TypeError", NOT_JSON, message)


def materialise(arguments: object) -> tuple[object, str | None]:
    """The frozen arguments, or ``(raw text, violation)`` for JSON text that does not parse.

    Raises:
        NotJSONError: not lossless JSON (for text: nested too deep).
    """
    if type(arguments) is JSONText:
        return arguments.parse()
    return freeze(arguments), None


def _content_of(value: object) -> tuple[ContentBlock, ...] | None:
    """Content for a body's return value, or ``None`` when it is plain JSON data."""
    if type(value) is str:
        return (text_block(value),)
    if isinstance(value, TextBlock | ImageBlock):
        return (value,)
    if isinstance(value, list | tuple):
        items = cast("Sequence[object]", value)
        if not items:
            return ()
        blocks = tuple(item for item in items if isinstance(item, TextBlock | ImageBlock))
        if len(blocks) == len(items):
            return blocks
    return None


def body_result(value: object) -> ToolResult:
    """Turn what a body returned into a candidate result."""
    if type(value) is str:  # the usual case: one text block
        return text_result(value)
    content = _content_of(value)
    if content is not None:
        return make_result(content)
    meta: object = None
    if isinstance(value, ToolOutput):
        meta = value.meta
        content = _content_of(value.content)
        if content is None:
            raise TypeError(
                "ToolOutput.content must be a str or content blocks, "
                f"got {safe_repr(value.content)}"
            )
        return make_result(content, meta=meta)
    try:
        text = to_compact_json(freeze(value))
    except NotJSONError as exc:
        return not_json_result("result", exc)
    return make_result((TextBlock(text),))


def with_body_contexts(run: _Run, result: ToolResult) -> ToolResult:
    """Contexts deferred by the body always survive and come first, each once.

    A wrapper may pass them on in any position (``(mine, *r.additional_contexts)``): the
    body's own objects (by identity) are moved to the front, not repeated.
    """
    body = run.body_contexts
    if not body:
        return result
    have = result.additional_contexts
    if len(have) >= len(body) and all(a is b for a, b in zip(body, have, strict=False)):
        return result
    ids = {id(ctx) for ctx in body}
    rest = tuple(ctx for ctx in have if id(ctx) not in ids)
    return replace_result(result, additional_contexts=(*body, *rest))


class FinalResult(Exception):
    """Raised inside the pipeline for results that skip every later stage."""

    def __init__(self, result: ToolResult) -> None:
        self.result = result


def failure_outcome(failure: BaseException, contexts: tuple[AdditionalContext, ...]) -> ToolResult:
    """The result of a body (or its nursery's work) that raised ``failure``.

    Real failures win over cancellation: when the body or its work raised an ``Exception``
    while an enclosing scope cancelled the rest, the call is ``TOOL_FAILED`` whatever order
    Trio ran them in (the enclosing scope's cancellation is level-triggered: its next
    checkpoint raises ``trio.Cancelled`` again).

    Raises:
        BaseException: not ours to turn into a result (ambient cancellation alone,
            ``KeyboardInterrupt``...).  The per-call nursery is ours: callers get a lone
            exception unwrapped, and ambient cancellation as a bare ``trio.Cancelled``
            (several are interchangeable: the cancelled scope catches any of them).
    """
    failures, others = split_failure(failure)
    if not others or (failures and all(isinstance(o, trio.Cancelled) for o in others)):
        return replace_result(failures_result(failures, TOOL_FAILED), additional_contexts=contexts)
    try:
        if not failures and (
            len(others) == 1 or all(isinstance(o, trio.Cancelled) for o in others)
        ):
            raise others[0] from None
        raise failure
    finally:
        # This frame is in the traceback of what it raises: hold none of it.
        del failure, failures, others


def cancelled_instead(run: _Run, result: ToolResult) -> ToolResult:
    """The ``ABORTED*`` result that replaces a non-error ``result`` once the caller's signal
    has fired, keeping its contexts and halt.

    The caller checks both conditions, right after ``checkpoint_if_cancelled()``: ambient
    cancellation too overrides a success returned from under a cancelled enclosing scope (a
    wrapper or hook swallowed that scope's ``trio.Cancelled``): the checkpoint re-raises
    ``trio.Cancelled``, so ``execute`` publishes ``ABORTED*`` and propagates it.
    """
    return aborted(
        body_invoked=run.body_invoked,
        additional_contexts=result.additional_contexts,
        halt=result.halt,
    )


def finish(run: _Run, result: ToolResult, finalize: FinalizeContent | None) -> ToolResult:
    """Snapshot the candidate losslessly, apply halt and conclusion, finalize content."""
    halt = run.halt if run.halt is not None else result.halt
    concludes = (run.concludes or result.concludes_turn) and not result.is_error
    meta = result.meta
    try:
        if meta is not None:  # the usual case skips the call
            meta = freeze(meta)
    except NotJSONError as exc:
        result = replace_result(
            not_json_result("result", exc), additional_contexts=result.additional_contexts
        )
        meta, concludes = None, False
    if halt is not result.halt or concludes is not result.concludes_turn or meta is not result.meta:
        result = replace_result(result, halt=halt, concludes_turn=concludes, meta=meta)
    if finalize is None:
        return result
    try:
        content = finalize(run.execution(), result)
        if content is None:
            return result
        return replace_result(result, content=_content(content))
    except (Exception, trio.Cancelled) as exc:
        # A synchronous callback reaches no checkpoint: a Cancelled from it is stray.  (No
        # local of its own holds the exception: its traceback holds this frame.)
        return replace_result(
            exception_result(
                StrayCancelled() if isinstance(exc, trio.Cancelled) else exc, FINALIZE_FAILED
            ),
            additional_contexts=result.additional_contexts,
            halt=halt,
        )
