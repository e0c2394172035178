"""The GUI's key management page (``/keys``) over real HTTP (uvicorn on 127.0.0.1).

A login made with an admin key lists its resource's keys, creates one (shown
once, on the answer page), and revokes one behind a confirmation page, all
through forms with the CSRF token; the audit records both. Another resource's
keys are "not found". Read and write keys and the operator get 403 (and no nav
link); single-resource mode has no such page (404).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import psycopg
import pytest

import popagent
from popagent.keys import KeyStore, looks_like_key
from popagent.web import ServerConfig
from popagent.web.middleware import LOGIN_COOKIE
from tests.gui_support import csrf_token, field_error, post_form
from tests.web_support import uvicorn_server

OPERATOR = "operator-token-keys-gui-0123456789"
TOKEN = "single-resource-token-0123456789"
NAV_LINK = '<a href="/keys"'


@contextmanager
def multi_server(database_url: str) -> Iterator[str]:
    config = ServerConfig(maintenance_interval_s=None, token=OPERATOR, multi_resource=True)
    with uvicorn_server(
        config, database_url=database_url, model_from_env=False, embedder=None
    ) as base:
        yield base


def _rows(database_url: str, query: str, *params: object) -> list[tuple[Any, ...]]:
    with psycopg.connect(database_url, autocommit=True) as conn:
        return conn.execute(query, params).fetchall()


async def log_in(client: httpx.AsyncClient, credential: str) -> None:
    await csrf_token(client, "/login")
    done = await post_form(client, "/login", {"token": credential, "next": "/"})
    assert done.status_code == 303, done.text
    assert LOGIN_COOKIE in client.cookies


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


@pytest.mark.plain_postgresql
async def test_an_admin_key_lists_creates_and_revokes_its_resources_keys(
    database_url: str, memory: popagent.LongTermMemory
) -> None:
    one, two = f"res-{uuid.uuid4().hex}", f"res-{uuid.uuid4().hex}"
    store = KeyStore(memory.pool)
    boss_row, boss = await store.create(one, "boss", "admin")
    worker_row, _ = await store.create(one, "worker", "write")
    theirs_row, theirs = await store.create(two, "theirs-only", "admin")
    with multi_server(database_url) as base:
        async with httpx.AsyncClient(base_url=base, timeout=30) as gui:
            await log_in(gui, boss)
            home = await gui.get("/")
            assert home.status_code == 200 and NAV_LINK in home.text

            listed = await gui.get("/keys")
            assert listed.status_code == 200, listed.text
            assert listed.headers["cache-control"] == "no-store"
            assert f'<code data-testid="resource">{one}</code>' in listed.text
            assert 'href="/keys" aria-current="page"' in listed.text
            rows = re.findall(r'<tr id="key-(\d+)" data-testid="key-row">', listed.text)
            assert rows == [str(boss_row.id), str(worker_row.id)]
            assert f"<code>{boss_row.prefix}…</code>" in listed.text
            assert "(this login)" in listed.text
            assert "theirs-only" not in listed.text and two not in listed.text
            assert boss not in listed.text and theirs not in listed.text  # prefixes only

            # No CSRF token, or a resource named in the form: refused, nothing made.
            bare = await post_form(gui, "/keys", {"name": "x", "scope": "read"}, csrf=False)
            assert bare.status_code == 403
            named = await post_form(
                gui, "/keys", {"name": "x", "scope": "read", "expires_at": "", "resource_id": two}
            )
            assert named.status_code == 422
            assert len(await store.list_keys(one)) == 2 and len(await store.list_keys(two)) == 1

            # Problems are shown at their fields, with the typed values; nothing is written.
            taken = await post_form(
                gui, "/keys", {"name": "worker", "scope": "write", "expires_at": ""}
            )
            assert taken.status_code == 422
            assert "already has a live key" in field_error(taken.text, "name")
            past = await post_form(
                gui, "/keys", {"name": "late", "scope": "read", "expires_at": "2001-01-01T00:00"}
            )
            assert past.status_code == 422 and "in the past" in field_error(past.text, "expires_at")
            assert 'value="2001-01-01T00:00"' in past.text
            garbled = await post_form(
                gui, "/keys", {"name": "late", "scope": "read", "expires_at": "soon"}
            )
            assert "2026-12-31T18:00" in field_error(garbled.text, "expires_at")
            scope = await post_form(gui, "/keys", {"name": "x", "scope": "owner", "expires_at": ""})
            assert scope.status_code == 422 and "must be one of" in field_error(scope.text, "scope")
            bad_name = await post_form(
                gui, "/keys", {"name": " \u202e", "scope": "read", "expires_at": ""}
            )
            assert bad_name.status_code == 422 and field_error(bad_name.text, "name")
            assert len(await store.list_keys(one)) == 2

            # Created: shown once, on the answer page, for the login's resource.
            expiry = (datetime.now(UTC) + timedelta(days=30)).strftime("%Y-%m-%dT%H:%M:%S")
            made = await post_form(
                gui, "/keys", {"name": "laptop", "scope": "read", "expires_at": expiry}
            )
            assert made.status_code == 200, made.text
            assert made.headers["cache-control"] == "no-store"
            assert "shown once" in made.text
            [key] = re.findall(r'value="(pak_[A-Za-z0-9_-]+)" readonly', made.text)
            assert looks_like_key(key)
            assert key not in made.headers.get("set-cookie", "")
            [(resource_id, scope_of, expires_at)] = _rows(
                database_url,
                "SELECT resource_id, scope, expires_at FROM popagent_api_keys"
                " WHERE name = 'laptop' AND resource_id IN (%s, %s)",
                one,
                two,
            )
            assert (resource_id, scope_of) == (one, "read")
            assert expires_at.strftime("%Y-%m-%dT%H:%M:%S") == expiry
            api = httpx.AsyncClient(base_url=base, timeout=30)
            async with api:
                assert (await api.get("/api/facts", headers=bearer(key))).status_code == 200
                wrote = await api.post("/api/facts", json={"content": "x"}, headers=bearer(key))
                assert wrote.status_code == 403  # a read key
            again = await gui.get("/keys")
            assert key not in again.text and "laptop" in again.text
            laptop = next(k for k in await store.list_keys(one) if k.name == "laptop")

            # Another resource's key is not found, to look at or to revoke.
            assert (await gui.get(f"/keys/{theirs_row.id}/revoke")).status_code == 404
            foreign = await post_form(gui, f"/keys/{theirs_row.id}/revoke", {"confirm": "yes"})
            assert foreign.status_code == 404
            assert (await store.list_keys(two))[0].revoked_at is None

            # Revoking: a confirmation page, then the POST with confirm=yes.
            confirm = await gui.get(f"/keys/{laptop.id}/revoke")
            assert confirm.status_code == 200 and "Revoke key laptop?" in confirm.text
            assert "your own login" not in confirm.text
            unconfirmed = await post_form(gui, f"/keys/{laptop.id}/revoke", {})
            assert unconfirmed.status_code == 422
            no_csrf = await post_form(
                gui, f"/keys/{laptop.id}/revoke", {"confirm": "yes"}, csrf=False
            )
            assert no_csrf.status_code == 403
            async with httpx.AsyncClient(base_url=base, timeout=30) as api:
                assert (await api.get("/api/facts", headers=bearer(key))).status_code == 200
                gone = await post_form(gui, f"/keys/{laptop.id}/revoke", {"confirm": "yes"})
                assert gone.status_code == 303
                assert gone.headers["location"] == "/keys?notice=key-revoked"
                assert (await api.get("/api/facts", headers=bearer(key))).status_code == 401
            shown = await gui.get(gone.headers["location"])
            assert "Key revoked" in shown.text
            revoked_row = shown.text.split(f'<tr id="key-{laptop.id}"', 1)[1].split("</tr>", 1)[0]
            assert f"/keys/{laptop.id}/revoke" not in revoked_row  # nothing left to revoke
            assert "<td>no</td>" not in revoked_row
            twice = await post_form(gui, f"/keys/{laptop.id}/revoke", {"confirm": "yes"})
            assert twice.status_code == 404

            # Revoking the login's own key ends the login.
            own = await gui.get(f"/keys/{boss_row.id}/revoke")
            assert "your own login" in own.text
            ended = await post_form(gui, f"/keys/{boss_row.id}/revoke", {"confirm": "yes"})
            assert ended.status_code == 303
            out = await gui.get("/keys", follow_redirects=False)
            assert out.status_code == 303 and out.headers["location"].startswith("/login")
    events = [
        (e["event"], e["key_id"])
        for e in await store.audit(50, resource_id=one)
        if e["event"] in ("key_created", "key_revoked")
    ]
    assert ("key_created", laptop.id) in events
    assert ("key_revoked", laptop.id) in events
    assert ("key_revoked", boss_row.id) in events
    assert not any(e["event"] == "key_revoked" for e in await store.audit(50, resource_id=two))


@pytest.mark.plain_postgresql
async def test_the_keys_page_is_for_admin_keys_in_multi_resource_mode_only(
    database_url: str, memory: popagent.LongTermMemory, resource: str
) -> None:
    one = f"res-{uuid.uuid4().hex}"
    store = KeyStore(memory.pool)
    _, writer = await store.create(one, "writer", "write")
    _, reader = await store.create(one, "reader", "read")
    with multi_server(database_url) as base:
        for credential in (writer, reader, OPERATOR):
            async with httpx.AsyncClient(base_url=base, timeout=30) as gui:
                await log_in(gui, credential)
                home = await gui.get("/settings")
                assert NAV_LINK not in home.text
                assert (await gui.get("/keys")).status_code == 403
                made = await post_form(gui, "/keys", {"name": "sneaky", "scope": "admin"})
                assert made.status_code == 403
            async with httpx.AsyncClient(base_url=base, timeout=30) as api:
                with_bearer = await api.get("/keys", headers=bearer(credential))
                assert with_bearer.status_code == 403
    assert {k.name for k in await store.list_keys(one)} == {"writer", "reader"}
    refusals = {
        (e["event"], e["reason"], e["path"])
        for e in await store.audit(50, resource_id=one)
        if e["event"] == "refused"
    }
    assert ("refused", "scope", "/keys") in refusals

    # Single-resource mode, with a token and without: no keys page at all.
    for token in (TOKEN, None):
        config = ServerConfig(resource_id=resource, maintenance_interval_s=None, token=token)
        with uvicorn_server(
            config, database_url=database_url, model_from_env=False, embedder=None
        ) as base:
            async with httpx.AsyncClient(base_url=base, timeout=30) as gui:
                if token is not None:
                    await log_in(gui, token)
                page = await gui.get("/keys")
                assert page.status_code == 404 and page.headers["content-type"].startswith(
                    "text/html"
                )
                assert NAV_LINK not in page.text
                await csrf_token(gui, "/settings")
                made = await post_form(gui, "/keys", {"name": "x", "scope": "read"})
                assert made.status_code == 404
                revoke = await post_form(gui, "/keys/1/revoke", {"confirm": "yes"})
                assert revoke.status_code == 404
    assert await store.list_keys(resource) == []


@pytest.mark.plain_postgresql
async def test_a_login_made_with_a_key_spends_from_the_keys_bucket(
    database_url: str, memory: popagent.LongTermMemory
) -> None:
    """A GUI login is the key it was made with: its pages take tokens from the key's
    bucket (``key_burst`` of them at once), shared with the key's API requests, and
    the refusals are audited with the GUI route; the operator's login spends none."""
    one = f"res-{uuid.uuid4().hex}"
    store = KeyStore(memory.pool)
    row, key = await store.create(one, "browser", "write")
    config = ServerConfig(
        maintenance_interval_s=None,
        token=OPERATOR,
        multi_resource=True,
        key_requests_per_minute=6,  # a token every 10 s: none comes back during the test
        key_burst=4,
    )
    with uvicorn_server(
        config, database_url=database_url, model_from_env=False, embedder=None
    ) as base:
        async with httpx.AsyncClient(base_url=base, timeout=30) as gui:
            await log_in(gui, key)  # /login itself is open: it spends nothing
            pages = [await gui.get("/") for _ in range(5)]
            assert [p.status_code for p in pages] == [200, 200, 200, 200, 429]
            # A person gets a page with the nav and the wait, not a JSON body.
            assert pages[-1].headers["content-type"].startswith("text/html")
            assert "Too many requests" in pages[-1].text and "6 requests a minute" in pages[-1].text
            assert int(pages[-1].headers["retry-after"]) >= 1
            api = await gui.get("/api/facts", headers=bearer(key))
            assert api.status_code == 429 and int(api.headers["retry-after"]) >= 1
            assert "in bursts of up to 4" in api.json()["message"]
        async with httpx.AsyncClient(base_url=base, timeout=30) as operator:
            await log_in(operator, OPERATOR)
            assert [(await operator.get("/keys")).status_code for _ in range(6)] == [403] * 6
    [listed] = await store.list_keys(one)
    assert listed.id == row.id and listed.use_count == 1 + 5 + 1  # the login, pages, API
    refused = [e for e in await store.audit(50, resource_id=one) if e["reason"] == "rate_limited"]
    assert sorted(e["path"] for e in refused) == ["/", "/api/facts"]
