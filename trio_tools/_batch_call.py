"""One call of a batch as the registry runs it: the input it runs with and the hooks it
reports back through, in one object (:class:`BatchCall`)."""

# the package's modules share underscore helpers with each other:
# pyright: reportPrivateUsage=false

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, final

import trio

from ._calls import ToolCall
from ._input import ExecutionToken, ToolExecutionInput
from ._json import JSONText
from ._results import ToolResult
from ._signal import CancelSignal

if TYPE_CHECKING:
    from ._batch import Batch


@final
class BatchCall:
    """Call ``index`` of a batch: the registry's input for it (``_stages.CallInput``) and
    its private hooks (``_stages.CallHooks``).

    The input has the fields a :class:`ToolExecutionInput` would have: the model's raw
    JSON text (a ``str``) as :class:`~trio_tools._json.JSONText`, for the registry to parse
    at entry, the batch's signal and agent, no parent, and ``on_progress`` bound to the
    call's id.  Nothing outside the library sees it (the registry reads each field once at
    entry, and classification the name and the arguments), so the batch builds this one
    plain object per call rather than a frozen input plus its hooks.
    """

    __slots__ = (
        "_batch",
        "_index",
        "_slot_held",
        "agent",
        "arguments",
        "call_id",
        "marks_dispatch",
        "name",
        "on_progress",
        "parent",
        "signal",
    )

    def __init__(self, batch: Batch, index: int, call: ToolCall) -> None:
        """
        Raises:
            TypeError: what ``ToolExecutionInput`` raises for the call's id or name.
        """
        call_id, name, arguments = call.call_id, call.name, call.arguments
        if type(arguments) is str and arguments == "{}":
            # A model's most common arguments: one text, parsed once, serves every such call
            # (its parse is the same shared empty object whichever text object it comes from).
            arguments = _EMPTY_OBJECT_TEXT
        elif isinstance(arguments, str):
            arguments = JSONText(arguments)
        on_progress = batch.on_progress
        if type(call_id) is not str or type(name) is not str:
            # What the input's constructor rejects: let it raise its own error.
            ToolExecutionInput(call_id=call_id, name=name, arguments=arguments, signal=batch.signal)
        self.call_id = call_id
        self.name = name
        self.arguments: object = arguments
        self.signal: CancelSignal = batch.signal
        self.agent: object | None = batch.agent
        self.parent: ExecutionToken | None = None
        self.on_progress: Callable[[object], None] | None = (
            None if on_progress is None else functools.partial(on_progress, call_id)
        )
        self._batch = batch
        self._index = index
        self._slot_held = False  # set when the call starts in a pool slot
        # Only a journal with `record_dispatch` has a marker to write before the body.
        self.marks_dispatch = batch.marks_dispatch

    # -- the hooks -----------------------------------------------------------------------

    def gate_passed(self) -> None:
        batch = self._batch
        batch.gate_passed[self._index] = True
        if batch.waiting is not None:  # an awake driver sees it at its next step
            batch.changed()

    async def dispatching(self) -> bool:
        batch = self._batch
        record_dispatch = batch.record_dispatch
        if record_dispatch is None:
            return True
        try:
            # The write-ahead marker: a write that began always completes.
            with trio.CancelScope(shield=True):
                await record_dispatch(batch.calls[self._index])
        except Exception as exc:
            batch._fail(exc)
            return False
        return True

    def dispatch_settled(self) -> None:
        # The pool slot frees here, before post-execute.
        if self.free_slot():
            self._batch.changed()

    def free_slot(self) -> bool:
        """Free the call's pool slot if it still holds one (at most once); ``True`` if a
        start may have been waiting for it (the pool was full)."""
        if not self._slot_held:
            return False
        self._slot_held = False
        batch = self._batch
        batch.in_flight -= 1
        # Below a full pool, the slot decides nothing: every other change reports itself.
        return batch.in_flight + 1 >= batch.max_parallel

    def published(self, result: ToolResult) -> None:
        self._batch.published[self._index] = result


_EMPTY_OBJECT_TEXT = JSONText("{}")
