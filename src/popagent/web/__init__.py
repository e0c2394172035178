"""The popagent server: the management API, the web GUI and chat over HTTP.

``create_app(ServerConfig(...))`` builds the ASGI app; ``popagent serve`` runs
it with uvicorn. Layout: ``config`` (settings), ``services`` (what routes
share), ``api/`` (JSON routes), ``schemas`` (strict bodies), ``errors`` (one
error body), ``middleware`` (access log, headers, token, request guard),
``scheduler`` (daily maintenance), ``gui/`` (pages).
"""

from .app import create_app
from .config import DEFAULT_HOST, DEFAULT_PORT, DEFAULT_RESOURCE, ServerConfig

__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "DEFAULT_RESOURCE", "ServerConfig", "create_app"]
