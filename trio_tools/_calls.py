"""What a batch takes and gives: the model's :class:`ToolCall`, the step's :class:`BatchOutcome`."""

from __future__ import annotations

from typing import Any, final

import attrs

from ._results import AdditionalContext, Halt, ToolResult
from ._wire import WIRE_VERSION, WireReader, json_to_wire

__all__ = ["BatchOutcome", "ToolCall"]

_str = attrs.validators.instance_of(str)


@final
@attrs.frozen
class ToolCall:
    """One tool call as the model asked for it: ``ToolCall(call_id, name, arguments)``.

    ``arguments`` is the model's raw JSON text (a ``str``) or an already-parsed JSON value.
    Raw text is parsed when the call starts, losslessly: integers of any size are kept
    exactly, and empty or whitespace-only text means ``{}``.  Text that is not valid JSON
    (``NaN`` and ``Infinity`` included) is ``INVALID_ARGS`` with the message ``invalid
    arguments: not valid JSON ({reason} at line L column C)``, and a number too large for
    a float (``1e400``) is ``INVALID_ARGS`` at its path (``$.timeout: number out of
    range``); a raw tool (one without an argument type) receives such text unchanged, as
    the ``str``.  Text nested deeper than 512 arrays and objects is ``NOT_JSON``, as the
    same value would be.  To pass a JSON string value, pass its JSON text (``'"text"'``).
    The value is kept as given; the registry takes its frozen snapshot when the call
    starts.

    Unlike most multi-field values of the library, the fields may be given positionally:
    they mirror the ``(id, name, arguments)`` triple every model API returns.
    """

    call_id: str = attrs.field(validator=_str)
    name: str = attrs.field(validator=_str)
    arguments: object

    def to_dict(self) -> dict[str, Any]:
        """The call's wire form: ``{"v": 1, "call_id": ..., "name": ..., "arguments": ...}``.

        A fresh ``dict`` of plain JSON values.  Raw JSON text stays the ``str`` it is;
        parsed arguments are copied as plain JSON (arrays as ``list``, objects as
        ``dict``), so ``ToolCall.from_dict(call.to_dict()) == call`` whenever the arguments
        hold no tuples (JSON has one kind of array, and it comes back as ``list``).

        Raises:
            ValueError: the arguments are not losslessly JSON-serializable.
        """
        arguments = self.arguments
        return {
            "v": WIRE_VERSION,
            "call_id": self.call_id,
            "name": self.name,
            "arguments": arguments
            if type(arguments) is str
            else json_to_wire("ToolCall", "arguments", arguments),
        }

    @classmethod
    def from_dict(cls, data: object) -> ToolCall:
        """The call whose wire form (see :meth:`to_dict`) is ``data``.

        Every key is required.  The arguments are copied (plain JSON), never shared with
        ``data``.

        Raises:
            ValueError: ``data`` is not a wire form of this version: the message names the
                first bad field, also an unknown one.
        """
        reader = WireReader("ToolCall", "", data)
        reader.only(("v", "call_id", "name", "arguments"))
        reader.version()
        return cls(
            reader.typed("call_id", str), reader.typed("name", str), reader.json("arguments")
        )


@final
@attrs.frozen(kw_only=True)
class BatchOutcome:
    """What :func:`run_tool_calls` returns for one model step.

    ``results``: one per call, in model order.  ``aborted``: the step's signal had fired
    when the batch returned.  ``halt``: the first halt in model order, or ``None``.
    ``concludes_turn``: some result concludes the turn.  ``contexts``: every result's
    ``additional_contexts``, concatenated in model order.
    """

    results: tuple[ToolResult, ...]
    aborted: bool
    halt: Halt | None
    concludes_turn: bool
    contexts: tuple[AdditionalContext, ...]
