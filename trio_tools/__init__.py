"""trio_tools: a Trio-native tool registry with caller-owned cancellation.

Every tool call carries a required :class:`CancelSignal` owned by its caller; the registry
binds it onto Trio cancel scopes, awaits started work to quiescence, and returns exactly one
frozen :class:`ToolResult` per call, whose code says whether the body ran.
"""

from ._calls import BatchOutcome as BatchOutcome
from ._calls import ToolCall as ToolCall
from ._command import CommandResult as CommandResult
from ._command import run_command as run_command
from ._console import console_approver as console_approver
from ._decisions import Accept as Accept
from ._decisions import Allow as Allow
from ._decisions import ApprovalAnswer as ApprovalAnswer
from ._decisions import ApprovalRequest as ApprovalRequest
from ._decisions import Ask as Ask
from ._decisions import Block as Block
from ._decisions import Deny as Deny
from ._decisions import PostDecision as PostDecision
from ._decisions import PreDecision as PreDecision
from ._derived import open_signal as open_signal
from ._execution import ToolDefinition as ToolDefinition
from ._execution import ToolDispatchExecution as ToolDispatchExecution
from ._execution import ToolExecution as ToolExecution
from ._execution import ToolRunContext as ToolRunContext
from ._execution import ToolSchema as ToolSchema
from ._input import ExecutionToken as ExecutionToken
from ._input import ToolExecutionInput as ToolExecutionInput
from ._instrument import Instrument as Instrument
from ._journal import BatchRecord as BatchRecord
from ._postgres import PostgresJournal as PostgresJournal
from ._postgres import open_postgres_journal as open_postgres_journal
from ._registry import Approver as Approver
from ._registry import AroundWrapper as AroundWrapper
from ._registry import Guard as Guard
from ._registry import PostExecuteHook as PostExecuteHook
from ._registry import PreExecuteHook as PreExecuteHook
from ._registry import Registration as Registration
from ._registry import ResultObserver as ResultObserver
from ._registry import ToolRegistry as ToolRegistry
from ._results import BLOCKED as BLOCKED
from ._results import DENIED as DENIED
from ._results import FINALIZE_FAILED as FINALIZE_FAILED
from ._results import INVALID_ARGS as INVALID_ARGS
from ._results import NOT_JSON as NOT_JSON
from ._results import POST_EXECUTE_FAILED as POST_EXECUTE_FAILED
from ._results import PRE_EXECUTE_FAILED as PRE_EXECUTE_FAILED
from ._results import TOOL_ABORTED as TOOL_ABORTED
from ._results import TOOL_ABORTED_BEFORE_DISPATCH as TOOL_ABORTED_BEFORE_DISPATCH
from ._results import TOOL_FAILED as TOOL_FAILED
from ._results import TOOL_TIMEOUT as TOOL_TIMEOUT
from ._results import UNKNOWN_TOOL as UNKNOWN_TOOL
from ._results import WRAPPER_FAILED as WRAPPER_FAILED
from ._results import AdditionalContext as AdditionalContext
from ._results import ContentBlock as ContentBlock
from ._results import ErrorInfo as ErrorInfo
from ._results import Halt as Halt
from ._results import ImageBlock as ImageBlock
from ._results import TextBlock as TextBlock
from ._results import ToolOutput as ToolOutput
from ._results import ToolResult as ToolResult
from ._scheduler import run_tool_calls as run_tool_calls
from ._sigint import open_sigint_cancel as open_sigint_cancel
from ._signal import CancelReason as CancelReason
from ._signal import CancelSignal as CancelSignal
from ._signal import CancelSource as CancelSource
from ._sqlite import SqliteJournal as SqliteJournal
from ._sqlite import open_sqlite_journal as open_sqlite_journal
from ._timeout import timeout_policy as timeout_policy
from ._tool import define_tool as define_tool
from ._transcript import DurableJournal as DurableJournal
from ._transcript import Journal as Journal
from ._transcript import JournalEvent as JournalEvent
from ._transcript import MemoryJournal as MemoryJournal
from ._util import fix_module as _fix_module

__all__ = [
    "BLOCKED",
    "DENIED",
    "FINALIZE_FAILED",
    "INVALID_ARGS",
    "NOT_JSON",
    "POST_EXECUTE_FAILED",
    "PRE_EXECUTE_FAILED",
    "TOOL_ABORTED",
    "TOOL_ABORTED_BEFORE_DISPATCH",
    "TOOL_FAILED",
    "TOOL_TIMEOUT",
    "UNKNOWN_TOOL",
    "WRAPPER_FAILED",
    "Accept",
    "AdditionalContext",
    "Allow",
    "ApprovalAnswer",
    "ApprovalRequest",
    "Approver",
    "AroundWrapper",
    "Ask",
    "BatchOutcome",
    "BatchRecord",
    "Block",
    "CancelReason",
    "CancelSignal",
    "CancelSource",
    "CommandResult",
    "ContentBlock",
    "Deny",
    "DurableJournal",
    "ErrorInfo",
    "ExecutionToken",
    "Guard",
    "Halt",
    "ImageBlock",
    "Instrument",
    "Journal",
    "JournalEvent",
    "MemoryJournal",
    "PostDecision",
    "PostExecuteHook",
    "PostgresJournal",
    "PreDecision",
    "PreExecuteHook",
    "Registration",
    "ResultObserver",
    "SqliteJournal",
    "TextBlock",
    "ToolCall",
    "ToolDefinition",
    "ToolDispatchExecution",
    "ToolExecution",
    "ToolExecutionInput",
    "ToolOutput",
    "ToolRegistry",
    "ToolResult",
    "ToolRunContext",
    "ToolSchema",
    "console_approver",
    "define_tool",
    "open_postgres_journal",
    "open_sigint_cancel",
    "open_signal",
    "open_sqlite_journal",
    "run_command",
    "run_tool_calls",
    "timeout_policy",
]

_fix_module(globals(), __all__)
del _fix_module
