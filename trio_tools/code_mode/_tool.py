"""The ``run_code`` tool: one program, many nested tool calls, one lifetime."""

# the package's modules share underscore helpers with each other:
# pyright: reportPrivateUsage=false
# run-time validation of values from untyped callers:
# pyright: reportUnnecessaryIsInstance=false

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Mapping
from typing import Any, Final

import attrs
import trio

from .._derived import open_signal
from .._execution import ToolDefinition, ToolRunContext
from .._input import ToolExecutionInput
from .._json import FrozenDict
from .._registry import ToolRegistry
from .._results import DENIED, TOOL_ABORTED_BEFORE_DISPATCH, TOOL_FAILED, TextBlock, ToolResult
from .._signal import CancelSignal, CancelSource
from ._errors import CodeRunFailedError
from ._runtime import CodeRuntime, SubprocessRuntime
from ._stub import sdk_stub

__all__ = ["run_code_tool"]

SETTLED_REASON: Final = "run_code settled"

_PARAMETERS: Final = FrozenDict(
    {
        "type": "object",
        "properties": FrozenDict(
            {
                "code": FrozenDict(
                    {
                        "type": "string",
                        "description": "A Python program; top-level await is allowed.",
                    }
                )
            }
        ),
        "required": ("code",),
    }
)

_REJECTED: Final = FrozenDict(
    {
        "error": FrozenDict(
            {
                "code": TOOL_ABORTED_BEFORE_DISPATCH,
                "message": "tool call aborted before dispatch: the code run has settled",
            }
        )
    }
)


@attrs.frozen
class _RunCodeArgs:
    code: str


def _error_reply(code: str, message: str) -> Mapping[str, object]:
    return {"error": {"code": code, "message": message}}


def _reply(result: ToolResult) -> Mapping[str, object]:
    text = "\n".join(block.text for block in result.content if isinstance(block, TextBlock))
    if not result.is_error:
        return {"ok": text}
    error = result.error
    if error is None:
        return _error_reply(TOOL_FAILED, text)
    return _error_reply(error.code, error.message)


class _Pending:
    __slots__ = ("after", "done", "entered", "input", "parallel", "reply")

    def __init__(self, input: ToolExecutionInput, parallel: bool) -> None:
        self.input = input
        self.parallel = parallel
        self.done = trio.Event()
        self.reply: Mapping[str, object] = _REJECTED
        # Set once the call has entered the registry (or was dropped): the next call to
        # start waits for it, so calls enter in the program's order.
        self.entered = trio.Event()
        self.after: trio.Event | None = None  # the previous started call's ``entered``


async def _replied(reply: Mapping[str, object]) -> Mapping[str, object]:
    await trio.lowlevel.checkpoint()
    return reply


async def _reply_of(pending: _Pending) -> Mapping[str, object]:
    await pending.done.wait()
    return pending.reply


class _SubCalls:
    """The nested calls of one run: numbered, scheduled, dispatched and settled here.

    Parallel-safe calls overlap up to the limit; an exclusive call waits until nothing
    runs, and holds later calls back until it is done (calls start in the order the program
    made them).  Once the run's signal has fired, nothing more is dispatched.
    """

    def __init__(self, tool: _RunCode, ctx: ToolRunContext, signal: CancelSignal) -> None:
        self.registry = tool.registry
        self.own_name = tool.name
        self.max_parallel = tool.max_parallel_sub_calls
        self.ctx = ctx
        self.signal = signal
        self.nursery: trio.Nursery | None = None
        self.count = 0
        self.queue: deque[_Pending] = deque()
        self.running = 0
        self.exclusive_running = False
        self.closed = False
        self.all_done = trio.Event()
        self.last_entered: trio.Event | None = None

    def call(self, name: str, arguments: object) -> Awaitable[Mapping[str, object]]:
        """The runtime's ``call_tool``: take the call's place in line now; await the reply.

        The call is refused (without dispatch) once the run has settled, and when the
        program calls ``run_code`` itself.
        """
        if self.closed or self.signal.cancelled:
            return _replied(_REJECTED)
        if name == self.own_name:
            return _replied(_error_reply(DENIED, f'"{name}" cannot call itself'))
        ctx = self.ctx
        self.count += 1
        input = ToolExecutionInput(
            call_id=f"{ctx.call_id}:code:{self.count}",
            name=name,
            arguments=arguments,
            signal=self.signal,
            agent=ctx.agent,
            parent=ctx.token,
        )
        pending = _Pending(input, self.registry.execution_mode(input) == "parallel")
        self.queue.append(pending)
        self._pump()
        return _reply_of(pending)

    def _pump(self) -> None:
        queue = self.queue
        while queue:
            if self.closed or self.signal.cancelled:
                for pending in queue:
                    pending.done.set()  # with the rejection it was created with
                queue.clear()
                break
            head = queue[0]
            if head.parallel:
                if self.exclusive_running or self.running >= self.max_parallel:
                    break
            elif self.running:
                break
            queue.popleft()
            self.running += 1
            self.exclusive_running = not head.parallel
            # Tasks started together run in no fixed order: each waits for its predecessor.
            head.after, self.last_entered = self.last_entered, head.entered
            assert self.nursery is not None
            self.nursery.start_soon(self._dispatch, head)

    async def _dispatch(self, pending: _Pending) -> None:
        try:
            after = pending.after
            if after is not None and not after.is_set():
                await after.wait()
            pending.entered.set()  # the next call enters once this one yields, in the registry
            if self.signal.cancelled:
                await trio.lowlevel.checkpoint()
                return  # settled between scheduling and starting: never dispatched
            result = await self.registry.execute(pending.input)
            self._forward(result)
            pending.reply = _reply(result)
        finally:
            pending.entered.set()
            self.running -= 1
            if not pending.parallel:
                self.exclusive_running = False
            pending.done.set()
            self._pump()

    def _forward(self, result: ToolResult) -> None:
        """The nested result's contexts, halt and conclusion become the outer call's."""
        ctx = self.ctx
        for context in result.additional_contexts:
            ctx.defer_context(context)
        if result.halt is not None:
            ctx.halt_turn(result.halt.reason)
        if result.concludes_turn:
            ctx.conclude_turn()

    def close(self) -> None:
        """No more dispatch: reject what is queued and every later call."""
        self.closed = True
        self._pump()

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Own the nested calls' tasks until the run has settled and they are all done."""
        # Nested calls stop through the run's signal, which every end of the run fires: so
        # each returns its result (and hands over its contexts) rather than being
        # interrupted by the cancellation of the run itself.
        with trio.CancelScope(shield=True):
            async with trio.open_nursery() as nursery:
                self.nursery = nursery
                task_status.started()
                await self.all_done.wait()


class _RunCode:
    """The body of a ``run_code`` tool (a callable object: :func:`sdk_stub` skips it)."""

    is_run_code: Final = True  # what sdk_stub looks for

    def __init__(
        self,
        registry: ToolRegistry,
        runtime: CodeRuntime,
        name: str,
        max_parallel_sub_calls: int,
    ) -> None:
        self.registry = registry
        self.runtime = runtime
        self.name = name
        self.max_parallel_sub_calls = max_parallel_sub_calls

    def __repr__(self) -> str:
        return f"<run_code body of {self.name!r}>"

    async def __call__(self, args: _RunCodeArgs, ctx: ToolRunContext) -> str:
        settle = CancelSource()
        async with open_signal(ctx.signal, settle.signal) as signal:
            sub_calls = _SubCalls(self, ctx, signal)
            failure: CodeRunFailedError | None = None
            output = ""
            async with trio.open_nursery() as nursery:
                try:
                    await nursery.start(sub_calls.serve)
                    output = await self.runtime.run(args.code, sub_calls.call)
                except CodeRunFailedError as exc:
                    failure = exc
                finally:
                    # Settlement: in-flight calls see the run's signal, queued ones are
                    # rejected, and the nested calls' nursery closes once they are done.
                    settle.cancel(SETTLED_REASON)
                    sub_calls.close()
                    sub_calls.all_done.set()
            if failure is not None:
                raise failure
        return output


def run_code_tool(
    registry: ToolRegistry,
    *,
    runtime: CodeRuntime | None = None,
    name: str = "run_code",
    max_parallel_sub_calls: int = 10,
    timeout: float | None = None,
) -> ToolDefinition[Any]:
    """A tool that runs a model-written Python program calling ``registry``'s tools.

    Returns the definition (register it with ``registry.register(...)``); its arguments are
    ``{"code": str}`` and its description embeds :func:`sdk_stub` of the tools registered
    now.  The program runs in ``runtime`` (a new :class:`SubprocessRuntime` by default) on
    asyncio, with top-level ``await``; ``await tools.NAME(**arguments)`` returns the nested
    result's text and raises ``ToolError(code, message)`` for an error result.

    Each nested call goes through ``registry.execute`` with the call id
    ``"{outer call id}:code:{n}"`` (``n`` counts from 1), ``parent`` the outer call's token,
    its ``agent``, and the signal of the run: derived from the outer ``ctx.signal``, fired
    with ``"run_code settled"`` when the run ends.  Parallel-safe calls
    (``registry.execution_mode``) overlap up to ``max_parallel_sub_calls``; exclusive ones
    run alone.  Nested contexts are deferred onto the outer call (kept when the run later
    fails), and their halts and turn conclusions forwarded.  ``run_code`` refuses to call
    itself (``DENIED``).

    Settlement: when the program ends, fails or is killed, in-flight calls are cancelled
    through the run's signal and awaited, queued ones are rejected without dispatch
    (``ABORTED_BEFORE_DISPATCH``), and the child is reaped before the result.  A failed
    program is ``CODE_RUN_FAILED``; outer cancellation is ``ABORTED``; ``timeout`` is the
    tool's own timeout (``TOOL_TIMEOUT`` where the registry enforces timeouts).

    Raises:
        ValueError: ``max_parallel_sub_calls`` is not an ``int`` >= 1, an empty ``name``, or
            an invalid ``timeout``.
    """
    if (
        isinstance(max_parallel_sub_calls, bool)
        or not isinstance(max_parallel_sub_calls, int)
        or max_parallel_sub_calls < 1
    ):
        raise ValueError(
            f"max_parallel_sub_calls must be an int >= 1, got {max_parallel_sub_calls!r}"
        )
    body = _RunCode(
        registry,
        SubprocessRuntime() if runtime is None else runtime,
        name,
        max_parallel_sub_calls,
    )
    stub = sdk_stub(registry)
    description = (
        "Run a Python program that calls the tools below and print what you need: the "
        "result is the program's output (stdout and stderr). The program runs on asyncio "
        "with top-level await, so `await asyncio.gather(...)` runs calls concurrently. "
        "`await tools.NAME(**arguments)` returns the tool's result text (use json.loads "
        "for JSON) and raises `ToolError(code, message)` when the call fails.\n\n"
        f"```python\n{stub}```"
    )
    return ToolDefinition(
        name=name,
        description=description,
        execute=body,
        args=_RunCodeArgs,
        parameters=_PARAMETERS,
        timeout=timeout,
        concurrency_safe=False,
    )
