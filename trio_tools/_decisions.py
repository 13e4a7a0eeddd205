"""Policy decisions: what pre-execute hooks, the approver and post-execute hooks return."""

# the package's modules share underscore helpers with each other:
# pyright: reportPrivateUsage=false

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal, final

import attrs

from ._results import AdditionalContext, ContentBlock, Halt, _content, _contexts

if TYPE_CHECKING:
    from ._execution import ToolExecution

__all__ = [
    "Accept",
    "Allow",
    "ApprovalAnswer",
    "ApprovalRequest",
    "Ask",
    "Block",
    "Deny",
    "PostDecision",
    "PreDecision",
]

_optional_halt = attrs.validators.optional(attrs.validators.instance_of(Halt))
_optional_str = attrs.validators.optional(attrs.validators.instance_of(str))


@final
@attrs.frozen
class Allow:
    """Pre-execute decision: let the call proceed (guards run next)."""


@final
@attrs.frozen
class Deny:
    """Pre-execute decision: refuse the call with ``reason`` (code ``DENIED``).

    ``halt`` also ends the agent's turn after this step.
    """

    reason: str = attrs.field(validator=attrs.validators.instance_of(str))
    halt: Halt | None = attrs.field(default=None, validator=_optional_halt, kw_only=True)


@final
@attrs.frozen
class Ask:
    """Pre-execute decision: ask the registry's approver; without one the call is denied."""

    reason: str | None = attrs.field(default=None, validator=_optional_str)


PreDecision = Allow | Deny | Ask
"""What a pre-execute hook returns."""


def _optional_content(
    value: Sequence[ContentBlock] | None,
) -> tuple[ContentBlock, ...] | None:
    return None if value is None else _content(value)


def _feedback(value: str | Sequence[ContentBlock]) -> str | tuple[ContentBlock, ...]:
    return value if isinstance(value, str) else _content(value)


@final
@attrs.frozen(kw_only=True)
class Accept:
    """Post-execute decision: keep the result.

    ``content`` (when not ``None``) replaces the model-visible content, also of an error,
    which stays an error.  ``additional_contexts`` are appended; ``halt`` ends the turn
    (unless the call already carries a halt: the first halt wins).
    """

    content: tuple[ContentBlock, ...] | None = attrs.field(
        default=None, converter=_optional_content
    )
    additional_contexts: tuple[AdditionalContext, ...] = attrs.field(
        default=(), converter=_contexts
    )
    halt: Halt | None = attrs.field(default=None, validator=_optional_halt)


@final
@attrs.frozen
class Block:
    """Post-execute decision: replace the result by an error (code ``BLOCKED``).

    The model sees ``feedback`` verbatim; only this decision's ``additional_contexts`` are
    kept.
    """

    feedback: str | tuple[ContentBlock, ...] = attrs.field(converter=_feedback)
    additional_contexts: tuple[AdditionalContext, ...] = attrs.field(
        default=(), converter=_contexts, kw_only=True
    )
    halt: Halt | None = attrs.field(default=None, validator=_optional_halt, kw_only=True)


PostDecision = Accept | Block
"""What a post-execute hook returns."""

ApprovalAnswer = Literal["granted", "rejected", "cancelled"]
"""What an approver answers."""


@final
@attrs.frozen
class ApprovalRequest:
    """What the approver is asked: the call (read-only view) and the hook's reason."""

    execution: ToolExecution
    reason: str | None = None
