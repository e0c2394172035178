"""popagent's memory over the Model Context Protocol (``popagent mcp``).

::

    async with popagent.connect() as app:
        await serve_stdio(MemoryServer(app, "popagent-user"))

Layout: ``guidance`` (what the model is told), ``shapes`` (structured results
and their schemas), ``tools`` (remember, recall, list_facts, forget_fact,
fact_history, restore_fact), ``episodes`` (list_episodes, get_episode),
``server`` (``MemoryServer``: the SDK server, the resource binding, hooks and
audit), ``transport`` (stdio, streamable HTTP). Imports point downward: this package uses ``agent``, ``memory`` and
``access``; only the CLI imports it.
"""

from .guidance import SERVER_INSTRUCTIONS
from .server import SESSION_PREFIX, MemoryServer, memory_tools
from .transport import (
    MCP_PATH,
    bind,
    http_app,
    http_server,
    serve_http,
    serve_stdio,
)

__all__ = [
    "MCP_PATH",
    "SERVER_INSTRUCTIONS",
    "SESSION_PREFIX",
    "MemoryServer",
    "bind",
    "http_app",
    "http_server",
    "memory_tools",
    "serve_http",
    "serve_stdio",
]
