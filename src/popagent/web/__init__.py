"""The popagent server: the management API, the web GUI and chat over HTTP.

``create_app(ServerConfig(...))`` builds the ASGI app; ``popagent serve`` runs
it with uvicorn. Layout: ``config`` (settings), ``services`` (what routes
share), ``api/`` (JSON routes), ``schemas`` (strict bodies), ``errors`` (one
error body), ``middleware`` (access log, headers, token, request guard),
``scheduler`` (daily maintenance), ``gui/`` (pages).
"""

from .app import create_app
from .config import ServerConfig

__all__ = ["ServerConfig", "create_app"]
