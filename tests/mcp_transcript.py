"""Print a transcript of one stdio session with ``popagent mcp``: every JSON-RPC
message as sent (``→``) and received (``←``), in the handshake era desktop
clients use. ``docs/mcp.md`` shows its output; ``tests/test_mcp.py`` runs it.

    .venv/bin/python -m tests.mcp_transcript      # a throwaway embedded PostgreSQL
    POPAGENT_DATABASE_URL=postgresql://... .venv/bin/python -m tests.mcp_transcript

The session: initialize, tools/list, a remember, a recall, and a remember that
tries to choose the resource.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["REQUESTS", "main", "transcript"]

REQUESTS: list[dict[str, Any]] = [
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "transcript", "version": "1.0"},
        },
    },
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
    {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "tools/call",
        "params": {
            "name": "remember",
            "arguments": {
                "content": "Prefers dark mode in every app",
                "key": "ui.theme",
                "importance": 0.8,
            },
        },
    },
    {
        "jsonrpc": "2.0",
        "id": 4,
        "method": "tools/call",
        "params": {"name": "recall", "arguments": {"query": "does the user prefer dark mode?"}},
    },
    {
        "jsonrpc": "2.0",
        "id": 5,
        "method": "tools/call",
        "params": {
            "name": "remember",
            "arguments": {"content": "Likes tea", "resource_id": "someone-else"},
        },
    },
]


def _command() -> list[str]:
    """``popagent mcp``: the installed script beside this interpreter, else ``-m``."""
    script = Path(sys.executable).with_name("popagent")
    if script.exists():
        return [str(script), "mcp"]
    return [sys.executable, "-m", "popagent.cli", "mcp"]


def transcript(database_url: str, resource_id: str = "popagent-user") -> list[str]:
    """Run the session against ``database_url``; the transcript's lines."""
    env = {**os.environ, "POPAGENT_DATABASE_URL": database_url, "POPAGENT_RESOURCE_ID": resource_id}
    command = _command()
    shown = "popagent mcp" if command[0].endswith("popagent") else " ".join(command[1:])
    lines = [f"$ {shown}    # POPAGENT_RESOURCE_ID={resource_id}"]
    with tempfile.TemporaryFile("w+") as err:
        with subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, env=env, text=True
        ) as process:
            assert process.stdin is not None and process.stdout is not None
            for message in REQUESTS:
                process.stdin.write(json.dumps(message) + "\n")
                process.stdin.flush()
                lines.append("→ " + json.dumps(message, ensure_ascii=False))
                if "id" not in message:
                    continue
                while True:
                    reply = process.stdout.readline()
                    if not reply:
                        raise RuntimeError("popagent mcp closed stdout")
                    answer = json.loads(reply)
                    lines.append("← " + json.dumps(answer, ensure_ascii=False))
                    if answer.get("id") == message["id"]:
                        break
            process.stdin.close()  # the end of the session: the server exits
            process.wait(timeout=30)
        err.seek(0)
        notes = [f"(stderr) {line}" for line in err.read().splitlines() if "popagent mcp:" in line]
    return lines[:1] + notes + lines[1:]


def main() -> None:
    url = os.environ.get("POPAGENT_DATABASE_URL")
    if url:
        print("\n".join(transcript(url)))
        return
    from popagent.store.embedded import EmbeddedServer

    with tempfile.TemporaryDirectory(prefix="popagent-transcript-") as tmp:
        server = EmbeddedServer(tmp, delete=True)
        try:
            print("\n".join(transcript(server.url)))
        finally:
            server.stop()


if __name__ == "__main__":
    main()
