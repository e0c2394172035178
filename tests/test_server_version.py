"""popagent refuses a PostgreSQL older than 17 at ``connect()``, before any statement.

No older PostgreSQL is installed where the suite runs, so the older server is a
stand-in on 127.0.0.1 that speaks the start of the wire protocol (authentication,
the parameters a server announces, ready for a query) and announces version 16.4;
it records whether popagent ever sent it a statement.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

import popagent
from popagent.store.migrate import MINIMUM_SERVER_VERSION, _version_text


def _message(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack("!I", len(body) + 4) + body


def _parameter(name: str, value: str) -> bytes:
    return _message(b"S", name.encode() + b"\0" + value.encode() + b"\0")


class OldServer:
    """Answers connections as PostgreSQL ``version`` would, up to the first statement."""

    def __init__(self, version: str) -> None:
        self.version = version
        self.statements: list[bytes] = []

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            (length,) = struct.unpack("!I", await reader.readexactly(4))
            await reader.readexactly(length - 4)  # the startup packet: protocol, user, database
            writer.write(_message(b"R", struct.pack("!I", 0)))  # AuthenticationOk
            for name, value in (
                ("server_version", self.version),
                ("server_encoding", "UTF8"),
                ("client_encoding", "UTF8"),
                ("DateStyle", "ISO, MDY"),
                ("integer_datetimes", "on"),
                ("standard_conforming_strings", "on"),
                ("TimeZone", "UTC"),
            ):
                writer.write(_parameter(name, value))
            writer.write(_message(b"K", struct.pack("!II", 4242, 99)))
            writer.write(_message(b"Z", b"I"))
            await writer.drain()
            while True:
                kind = await reader.readexactly(1)
                (length,) = struct.unpack("!I", await reader.readexactly(4))
                await reader.readexactly(length - 4)
                if kind == b"X":  # Terminate: the client hung up politely
                    return
                self.statements.append(kind)
                return  # a statement: this stand-in cannot answer it
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.close()


@asynccontextmanager
async def old_server(version: str) -> AsyncIterator[tuple[str, OldServer]]:
    stand_in = OldServer(version)
    server = await asyncio.start_server(stand_in.serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    url = f"postgresql://popagent@127.0.0.1:{port}/popagent?sslmode=disable&gssencmode=disable"
    async with server:
        yield url, stand_in


async def test_connect_refuses_postgresql_16_before_any_statement() -> None:
    async with old_server("16.4") as (url, stand_in):
        with pytest.raises(popagent.DatabaseError) as refused:
            async with popagent.connect(url, max_size=1):
                pass
    message = str(refused.value)
    assert "PostgreSQL 17 or later" in message and "PostgreSQL 16.4" in message
    assert stand_in.statements == []


async def test_the_minimum_is_the_version_of_the_oldest_migration_feature(
    memory: popagent.LongTermMemory,
) -> None:
    """Migration 0010 needs ALTER COLUMN ... SET EXPRESSION, new in PostgreSQL 17."""
    assert MINIMUM_SERVER_VERSION == 170000
    async with memory.pool.connection() as conn:
        assert conn.info.server_version >= MINIMUM_SERVER_VERSION


def test_version_numbers_read_as_people_write_them() -> None:
    assert _version_text(160004) == "16.4"
    assert _version_text(170000) == "17.0"
    assert _version_text(90624) == "9.6.24"
