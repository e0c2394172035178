"""GUI login sessions over real HTTP (uvicorn on 127.0.0.1, real PostgreSQL).

The login cookie holds a random login id, never the token; the database keeps
only its hash, with an expiry; logout and expiry end it at once, in every server
process on the database; ``Secure`` is set when served over HTTPS (the
``X-Forwarded-Proto`` of a proxy named with ``--trusted-proxy``, and of no other
client); failed logins past the limit get 429 with ``Retry-After``, in every
process, counted per address and credential tried, so that neither a forwarded
address nor a shared one lets a client lock out another's credential or guess
without bound.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import httpx
import psycopg

from popagent.web import ServerConfig
from popagent.web.middleware import LOGIN_COOKIE
from tests.gui_support import csrf_token, post_form
from tests.web_support import uvicorn_server

TOKEN = "login-test-token-0123456789"


@contextmanager
def servers(database_url: str, resource: str, n: int, **config: object) -> Iterator[list[str]]:
    """``n`` servers (separate apps, pools and event loops: as ``serve --workers``'s
    processes are) on one database, with ``TOKEN``."""
    settings = ServerConfig(
        resource_id=resource,
        token=TOKEN,
        maintenance_interval_s=None,
        **config,  # type: ignore[arg-type]
    )
    with ExitStack() as stack:
        yield [
            stack.enter_context(
                uvicorn_server(
                    settings, database_url=database_url, model_from_env=False, embedder=None
                )
            )
            for _ in range(n)
        ]


def _rows(database_url: str, sql: str, *params: object) -> list[tuple[Any, ...]]:
    with psycopg.connect(database_url, autocommit=True) as conn:
        cur = conn.execute(sql, params)
        return cur.fetchall() if cur.description else []


async def _log_in(client: httpx.AsyncClient, credential: str = TOKEN) -> httpx.Response:
    await csrf_token(client, "/login")
    return await post_form(client, "/login", {"token": credential, "next": "/settings"})


async def test_a_login_is_a_server_side_session_across_processes(
    database_url: str, resource: str
) -> None:
    with servers(database_url, resource, 2) as (first, second):
        async with httpx.AsyncClient(base_url=first) as a, httpx.AsyncClient(base_url=second) as b:
            response = await _log_in(a)
            assert response.status_code == 303
            login = a.cookies[LOGIN_COOKIE]
            assert TOKEN not in response.headers["set-cookie"]
            assert len(login) >= 40
            # Only the hash is stored, with an expiry about 12 hours away.
            stored = _rows(
                database_url,
                "SELECT login_sha256, resource_id, key_id, scope,"
                " extract(epoch FROM expires_at - now()) FROM popagent_logins"
                " WHERE login_sha256 = %s",
                hashlib.sha256(login.encode()).digest(),
            )
            assert len(stored) == 1
            _, stored_resource, key_id, scope, seconds = stored[0]
            assert (stored_resource, key_id, scope) == (resource, None, "admin")
            assert 43_000 < float(seconds) <= 43_200
            assert not _rows(
                database_url,
                "SELECT 1 FROM popagent_logins WHERE encode(login_sha256, 'escape') LIKE %s",
                f"%{login}%",
            )

            # The other process knows the login (the same table), and the API takes it.
            b.cookies.set(LOGIN_COOKIE, login)
            assert (await b.get("/settings")).status_code == 200
            assert (await b.get("/api/facts")).status_code == 200

            # Logging out in the first process ends it in the second at once.
            out = await post_form(a, "/logout", {})
            assert out.status_code == 303
            assert (await b.get("/settings", follow_redirects=False)).status_code == 303
            assert (await b.get("/api/facts")).status_code == 401
            a.cookies.set(LOGIN_COOKIE, login)  # a browser that kept the old cookie
            assert (await a.get("/api/facts")).status_code == 401


async def test_an_expired_login_lets_nobody_in(database_url: str, resource: str) -> None:
    with servers(database_url, resource, 1, login_ttl_s=60.0) as (base,):
        async with httpx.AsyncClient(base_url=base) as client:
            response = await _log_in(client)
            assert "Max-Age=60" in response.headers["set-cookie"]
            login = client.cookies[LOGIN_COOKIE]
            assert (await client.get("/api/facts")).status_code == 200
            _rows(
                database_url,
                "UPDATE popagent_logins SET expires_at = now() - interval '1 second'"
                " WHERE login_sha256 = %s",
                hashlib.sha256(login.encode()).digest(),
            )
            assert (await client.get("/api/facts")).status_code == 401
            assert (await client.get("/settings", follow_redirects=False)).status_code == 303


async def test_the_cookie_is_secure_when_served_over_https(
    database_url: str, resource: str
) -> None:
    with servers(database_url, resource, 1) as (untrusting,):
        # No proxy named: a client's X-Forwarded-Proto is ignored.
        async with httpx.AsyncClient(
            base_url=untrusting, headers={"x-forwarded-proto": "https"}
        ) as client:
            assert "Secure" not in (await _log_in(client)).headers["set-cookie"]
    with servers(database_url, resource, 1, trusted_proxies=("127.0.0.1",)) as (base,):
        # Behind a TLS-terminating proxy on this machine, named with --trusted-proxy:
        # the request's scheme is https.
        async with httpx.AsyncClient(
            base_url=base, headers={"x-forwarded-proto": "https"}
        ) as client:
            response = await _log_in(client)
            assert response.status_code == 303
            cookie = response.headers["set-cookie"]
            assert "Secure" in cookie and "HttpOnly" in cookie
        async with httpx.AsyncClient(base_url=base) as plain:
            response = await _log_in(plain)
            assert "Secure" not in response.headers["set-cookie"]


async def test_failed_logins_are_limited_in_every_process(database_url: str, resource: str) -> None:
    limits = {"login_failures": 3, "login_address_failures": 5, "login_window_s": 120.0}
    try:
        with servers(database_url, resource, 2, **limits) as (first, second):
            async with (
                httpx.AsyncClient(base_url=first) as a,
                httpx.AsyncClient(base_url=second) as b,
            ):
                for _ in range(2):
                    assert (await _log_in(a, "wrong-token-wrong-token")).status_code == 401
                # The third failure, in the other process, uses up the window.
                assert (await _log_in(b, "wrong-token-wrong-token")).status_code == 401
                for client in (a, b):
                    # That credential is not even compared now.
                    refused = await _log_in(client, "wrong-token-wrong-token")
                    assert refused.status_code == 429
                    assert 1 <= int(refused.headers["retry-after"]) <= 120
                    assert "Too many failed logins" in refused.text
                    assert LOGIN_COOKIE not in client.cookies
                events = _rows(
                    database_url,
                    "SELECT count(*) FROM popagent_access_audit WHERE event = 'login_failed'"
                    " AND id > (SELECT coalesce(max(id), 0) - 10 FROM popagent_access_audit)",
                )
                assert events[0][0] >= 3
                # Two other wrong credentials use up the address's bound (5, any credential):
                # now even the right token is not compared.
                for n in range(2):
                    assert (await _log_in(a, f"another-wrong-token-{n}")).status_code == 401
                refused = await _log_in(b)
                assert refused.status_code == 429 and LOGIN_COOKIE not in b.cookies
                # When the window has passed, the right token works again and clears the count.
                _rows(
                    database_url,
                    "UPDATE popagent_login_failures SET window_started = now() - interval '1 hour'"
                    " WHERE client LIKE '127.0.0.1%%'",
                )
                assert (await _log_in(a)).status_code == 303
                assert not _rows(
                    database_url,
                    "SELECT 1 FROM popagent_login_failures WHERE client = '127.0.0.1'",
                )
    finally:
        _forget_failures(database_url)


def _forget_failures(database_url: str) -> None:
    """Other tests log in from 127.0.0.1 too."""
    _rows(database_url, "DELETE FROM popagent_login_failures WHERE client LIKE '127.0.0.1%%'")
    _rows(database_url, "DELETE FROM popagent_login_failures WHERE client LIKE '203.0.113.%%'")


async def test_a_forwarded_address_can_neither_lock_out_a_victim_nor_buy_guesses(
    database_url: str, resource: str
) -> None:
    """Both attacks on the failed-login limit, over real HTTP."""
    try:
        # Without --trusted-proxy, X-Forwarded-For is the client's word and is ignored:
        # rotating it gives no more guesses than the address's bound (25 by default).
        with servers(database_url, resource, 1) as (base,):
            async with httpx.AsyncClient(base_url=base) as attacker:
                statuses = []
                for n in range(30):
                    attacker.headers["x-forwarded-for"] = f"198.51.100.{n}"
                    statuses.append(
                        (await _log_in(attacker, f"guess-{n:04d}-xxxxxxxx")).status_code
                    )
                assert statuses == [401] * 25 + [429] * 5, statuses
                counted = _rows(
                    database_url,
                    "SELECT failures FROM popagent_login_failures WHERE client = '127.0.0.1'",
                )
                assert counted == [(25,)]
                assert not _rows(
                    database_url,
                    "SELECT 1 FROM popagent_login_failures WHERE client LIKE '198.51.100.%%'",
                )
        _forget_failures(database_url)
        # Behind a named proxy (this test's client plays it), the forwarded address is
        # believed: five wrong logins "from" the victim's address lock out only the
        # credential they tried, not the victim's own.
        with servers(database_url, resource, 1, trusted_proxies=("127.0.0.1",)) as (base,):
            victim = {"x-forwarded-for": "203.0.113.9"}
            async with (
                httpx.AsyncClient(base_url=base, headers=victim) as attacker,
                httpx.AsyncClient(base_url=base, headers=victim) as person,
            ):
                for _ in range(5):
                    assert (await _log_in(attacker, "not-the-token-0000")).status_code == 401
                assert (await _log_in(attacker, "not-the-token-0000")).status_code == 429
                assert (await _log_in(person)).status_code == 303
                assert LOGIN_COOKIE in person.cookies
            # The counts were the forwarded address's, not the proxy's.
            assert not _rows(
                database_url,
                "SELECT 1 FROM popagent_login_failures WHERE client LIKE '127.0.0.1%%'",
            )
    finally:
        _forget_failures(database_url)
