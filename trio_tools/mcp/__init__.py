"""MCP in both directions: serve a registry to MCP clients, mount an MCP server's tools.

``trio_tools.mcp`` needs the official MCP SDK (the ``mcp`` extra:
``pip install 'trio_tools[mcp]'``); ``import trio_tools`` never imports it.

* :func:`server` builds an SDK ``mcp.server.Server`` whose ``tools/list`` lists the
  registry's tools and whose ``tools/call`` runs :meth:`ToolRegistry.execute` with a fresh
  :class:`~trio_tools.CancelSource` per request: the client's ``notifications/cancelled``
  and the connection closing fire it, with a reason saying which.  :func:`serve_stdio`
  serves it over the process's stdin and stdout.
* :func:`mount` turns every tool of a connected MCP client into a registry tool whose
  call's signal cancels the remote request.

Each served result carries its full wire form (``ToolResult.to_dict()``) under the
``_meta`` key :data:`RESULT_META_KEY`, so a result crosses a trio_tools-to-trio_tools hop
unchanged.  See ``docs/mcp.md``.
"""

try:
    import mcp as _mcp
except ImportError as _exc:  # pragma: no cover - exercised in a subprocess by the tests
    raise ImportError(
        "trio_tools.mcp needs the MCP SDK, which is not installed: "
        "pip install 'trio_tools[mcp]' (or pip install 'mcp>=2.3,<3')"
    ) from _exc
else:
    del _mcp

from .._util import fix_module as _fix_module
from ._convert import MCP_CONNECTION_LOST as MCP_CONNECTION_LOST
from ._convert import RESULT_META_KEY as RESULT_META_KEY
from ._mount import mount as mount
from ._server import serve_stdio as serve_stdio
from ._server import server as server

__all__ = [
    "MCP_CONNECTION_LOST",
    "RESULT_META_KEY",
    "mount",
    "serve_stdio",
    "server",
]

_fix_module(globals(), __all__)
del _fix_module
