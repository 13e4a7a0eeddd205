"""How a code run fails: :class:`CodeRunFailedError` and its result code."""

from __future__ import annotations

from typing import Final, Literal, final

__all__ = ["CODE_RUN_FAILED", "CodeRunFailedError", "FailureKind"]

CODE_RUN_FAILED: Final = "CODE_RUN_FAILED"
"""The program of a ``run_code`` call failed: a syntax error, an exception, a killed child
or too much output."""

FailureKind = Literal["syntax", "exception", "killed", "output_limit"]

_KINDS: frozenset[str] = frozenset(("syntax", "exception", "killed", "output_limit"))


@final
class CodeRunFailedError(Exception):
    """The program of a code run failed; a runtime raises it, ``run_code`` reports it.

    The ``run_code`` result is then an error with code ``CODE_RUN_FAILED`` and the model text
    ``Error: code run failed ({kind}): {message}``, followed by ``\\nCaptured output:\\n`` and
    the output when the program printed anything.  ``kind`` is ``"syntax"`` (the program
    does not compile), ``"exception"`` (it raised), ``"killed"`` (the child died: a signal,
    the memory limit) or ``"output_limit"`` (it printed more than the runtime allows).

    Raises:
        ValueError: ``kind`` is not one of the four kinds.
    """

    code: Final = CODE_RUN_FAILED

    def __init__(self, kind: FailureKind, message: str, output: str = "") -> None:
        if kind not in _KINDS:
            raise ValueError(f"kind must be one of {sorted(_KINDS)}, got {kind!r}")
        text = f"code run failed ({kind}): {message}"
        if output:
            text += f"\nCaptured output:\n{output}"
        super().__init__(text)
        self.kind: FailureKind = kind
        self.message = message
        self.output = output
