"""Model provider formats: connect a :class:`~trio_tools.ToolRegistry` to real model APIs.

Three modules, one per API, each with the same three functions and one class:

* :mod:`trio_tools.providers.openai_chat`: OpenAI Chat Completions.
* :mod:`trio_tools.providers.openai_responses`: the OpenAI Responses API.
* :mod:`trio_tools.providers.anthropic`: the Anthropic Messages API.

``tool_specs(registry, *, strict=False)`` gives the ``tools=`` parameter;
``tool_calls(message, *, registry=None)`` the :class:`~trio_tools.ToolCall`\\ s of one
assistant turn, in model order; ``tool_results(calls, outcome)`` what to append to the
conversation so that every call has exactly one result, in model order; and
``StreamAssembler`` (``.feed(event)``, ``.tool_calls()``) the calls of a streamed turn.

No SDK is a dependency: inputs may be SDK objects (anything with ``model_dump()``) or
plain dicts, and outputs are plain, mutable, JSON-ready dicts and lists.  See
``docs/providers.md``.
"""

from . import anthropic as anthropic
from . import openai_chat as openai_chat
from . import openai_responses as openai_responses

__all__ = ["anthropic", "openai_chat", "openai_responses"]
