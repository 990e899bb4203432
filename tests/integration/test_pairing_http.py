"""Pairing and client routes over real HTTP on 127.0.0.1, with a real SQLite store."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from lmsp_desktop.core.auth import OWNER, authenticate
from lmsp_desktop.core.config import Settings
from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.follow import EventFollower
from lmsp_desktop.core.models.registry import ModelRegistry
from lmsp_desktop.core.pairing import PairingManager
from lmsp_desktop.core.service import routes_clients, routes_pairing
from lmsp_desktop.core.service.context import CONTEXT, PRINCIPAL, ServiceContext
from lmsp_desktop.core.storage.clients import create_client
from lmsp_desktop.core.storage.store import Store

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


@web.middleware
async def owner_or_token_auth(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Owner unless a bearer token is sent; LmspError as the contract's error body."""
    try:
        header = request.headers.get("Authorization")
        db = request.app[CONTEXT].store.db
        request[PRINCIPAL] = OWNER if header is None else await authenticate(db, header, None)
        return await handler(request)
    except LmspError as exc:
        return web.json_response(exc.body(), status=exc.status)


async def serve(store: Store, clock: Clock) -> TestClient[Any, Any]:
    ctx = ServiceContext(
        store=store,
        settings=Settings(),
        registry=ModelRegistry(store.db, [], include_demo=False),
        follower=EventFollower(store.tasks),
        pairing=PairingManager(store.db, clock=clock),
    )
    app = web.Application(middlewares=[owner_or_token_auth])
    app[CONTEXT] = ctx
    app.add_routes(routes_pairing.routes)
    app.add_routes(routes_clients.routes)
    client: TestClient[Any, Any] = TestClient(TestServer(app, host="127.0.0.1", port=0))
    await client.start_server()
    return client


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def http(store: Store, clock: Clock) -> AsyncIterator[TestClient[Any, Any]]:
    client = await serve(store, clock)
    try:
        yield client
    finally:
        await client.close()


def manager_of(http: TestClient[Any, Any]) -> PairingManager:
    manager: PairingManager = http.server.app[CONTEXT].pairing
    return manager


async def post(http: TestClient[Any, Any], path: str, body: Any) -> tuple[int, dict[str, Any]]:
    async with http.post(path, json=body) as response:
        return response.status, await response.json()


async def start(http: TestClient[Any, Any], scopes: Any = "models:read responses:read") -> Any:
    status, body = await post(http, "/v1/pairing", {"client_name": "nb", "scopes": scopes})
    assert status == 200, body
    return body


async def poll(http: TestClient[Any, Any], started: Any, secret: str | None = None) -> Any:
    return await post(
        http,
        f"/v1/pairing/{started['pairing_id']}/token",
        {"pairing_secret": secret or started["pairing_secret"]},
    )


async def test_full_device_flow(http: TestClient[Any, Any], store: Store, clock: Clock) -> None:
    started = await start(http, ["models:read", "responses:read", "responses:write"])
    assert set(started) >= {"pairing_id", "pairing_secret", "user_code", "interval", "expires_in"}
    assert started["pairing_id"].startswith("pair_")

    [pending] = await manager_of(http).pending()
    assert pending["address"] == "127.0.0.1" and pending["user_code"] == started["user_code"]

    status, body = await poll(http, started)
    assert (status, body["error"]["code"]) == (400, "authorization_pending")

    await manager_of(http).approve(started["user_code"], frozenset({"responses:read"}))
    clock.now += 5
    async with http.post(
        f"/v1/pairing/{started['pairing_id']}/token",
        json={"pairing_secret": started["pairing_secret"]},
    ) as response:
        assert response.status == 200
        assert response.headers["Cache-Control"] == "no-store"
        token = await response.json()
    assert token["token_type"] == "bearer" and token["scopes"] == ["responses:read"]
    principal = await authenticate(store.db, f"Bearer {token['access_token']}", None)
    assert principal.client_id == token["client_id"]

    clock.now += 5
    status, body = await poll(http, started)
    assert status == 400 and body["error"]["code"] == "invalid_grant"
    assert "access_token" not in body["error"]


async def test_slow_down(http: TestClient[Any, Any], clock: Clock) -> None:
    started = await start(http)
    await poll(http, started)
    clock.now += 1
    status, body = await poll(http, started)
    assert (status, body["error"]["code"]) == (400, "slow_down")
    assert body["error"]["interval"] == 10


async def test_expired(http: TestClient[Any, Any], clock: Clock) -> None:
    started = await start(http)
    clock.now += started["expires_in"]
    status, body = await poll(http, started)
    assert (status, body["error"]["code"]) == (400, "expired_token")


async def test_denied(http: TestClient[Any, Any]) -> None:
    started = await start(http)
    await manager_of(http).deny(started["user_code"])
    status, body = await poll(http, started)
    assert (status, body["error"]["code"]) == (400, "access_denied")


async def test_brute_force_is_stopped_at_five_wrong_secrets(
    http: TestClient[Any, Any], clock: Clock
) -> None:
    started = await start(http)
    await manager_of(http).approve(started["user_code"])
    for _ in range(5):
        status, body = await poll(http, started, secret="x" * 43)
        assert (status, body["error"]["code"]) == (400, "invalid_grant")
    status, body = await poll(http, started)  # the sixth, with the right secret
    assert (status, body["error"]["code"]) == (400, "access_denied")


async def test_claim_flow_and_brute_force_stopped_at_five(
    http: TestClient[Any, Any], store: Store
) -> None:
    made = await manager_of(http).create_claim_code(frozenset({"responses:write"}))
    status, token = await post(
        http, "/v1/pairing/claim", {"code": made["code"].lower(), "client_name": "phone"}
    )
    assert status == 200 and token["scopes"] == ["responses:write"]
    assert (await authenticate(store.db, f"Bearer {token['access_token']}", None)).name == "phone"
    status, body = await post(
        http, "/v1/pairing/claim", {"code": made["code"], "client_name": "phone"}
    )
    assert (status, body["error"]["code"], body["error"]["param"]) == (400, "invalid_grant", "code")

    second = await manager_of(http).create_claim_code(frozenset({"responses:write"}))
    wrong = "BBBB-BBBB" if second["code"] != "BBBB-BBBB" else "CCCC-CCCC"
    for _ in range(5):
        status, body = await post(http, "/v1/pairing/claim", {"code": wrong, "client_name": "x"})
        assert (status, body["error"]["code"]) == (400, "invalid_grant")
    status, body = await post(
        http, "/v1/pairing/claim", {"code": second["code"], "client_name": "phone"}
    )
    assert (status, body["error"]["code"]) == (400, "invalid_grant")  # the sixth, right code


async def test_attempts_from_one_address_are_rate_limited(http: TestClient[Any, Any]) -> None:
    statuses = []
    for _ in range(12):
        status, body = await post(
            http, "/v1/pairing/claim", {"code": "BBBB-CCCC", "client_name": "x"}
        )
        statuses.append((status, body["error"]["code"]))
    assert statuses[:10] == [(400, "invalid_grant")] * 10
    assert statuses[10:] == [(429, "rate_limited")] * 2


@pytest.mark.parametrize(
    ("path", "body", "param", "code"),
    [
        ("/v1/pairing", {"scopes": "models:read"}, "client_name", "invalid_value"),
        ("/v1/pairing", {"client_name": "nb", "scopes": "root"}, "scopes", "invalid_scope"),
        ("/v1/pairing", {"client_name": "nb", "scopes": 7}, "scopes", "invalid_scope"),
        ("/v1/pairing", ["not", "an", "object"], None, "invalid_json"),
        ("/v1/pairing/claim", {"code": "BBBB-CCCC"}, "client_name", "invalid_value"),
        ("/v1/pairing/pair_x/token", {}, "pairing_secret", "invalid_value"),
    ],
)
async def test_bad_bodies_name_the_field(
    http: TestClient[Any, Any], path: str, body: Any, param: str | None, code: str
) -> None:
    status, answer = await post(http, path, body)
    assert status == 400
    assert (answer["error"]["param"], answer["error"]["code"]) == (param, code)


async def test_invalid_json_is_400(http: TestClient[Any, Any]) -> None:
    async with http.post(
        "/v1/pairing", data=b"{nope", headers={"Content-Type": "application/json"}
    ) as r:
        assert r.status == 400
        assert (await r.json())["error"]["code"] == "invalid_json"


async def test_missing_scopes_ask_for_everything_but_admin(http: TestClient[Any, Any]) -> None:
    status, started = await post(http, "/v1/pairing", {"client_name": "nb"})
    assert status == 200
    assert started["scopes"] == ["models:read", "responses:read", "responses:write"]


async def test_pending_survives_a_store_reopen(data_dir: Path, clock: Clock) -> None:
    first = Store(data_dir)
    await first.open()
    http = await serve(first, clock)
    started = await start(http)
    await http.close()
    await first.close()

    second = Store(data_dir)
    await second.open()
    http = await serve(second, clock)
    try:
        [pending] = await manager_of(http).pending()
        assert pending["pairing_id"] == started["pairing_id"]
        await manager_of(http).approve(started["pairing_id"])
        status, token = await poll(http, started)
        assert status == 200 and token["scopes"] == ["models:read", "responses:read"]
    finally:
        await http.close()
        await second.close()


async def test_clients_list_and_revoke(http: TestClient[Any, Any], store: Store) -> None:
    _, admin_token = await create_client(store.db, "admin-tool", frozenset({"admin"}))
    reader, reader_token = await create_client(store.db, "reader", frozenset({"models:read"}))
    admin = {"Authorization": f"Bearer {admin_token}"}

    async with http.get("/v1/clients", headers=admin) as response:
        assert response.status == 200
        listed = await response.json()
    assert listed["object"] == "list" and listed["has_more"] is False
    assert [c["name"] for c in listed["data"]] == ["reader", "admin-tool"]
    assert all(
        "token_hash" not in c and c["token_prefix"].startswith("lmsp_") for c in listed["data"]
    )

    async with http.get("/v1/clients?limit=1", headers=admin) as response:
        page = await response.json()
    assert len(page["data"]) == 1 and page["has_more"] is True

    async with http.get("/v1/clients", headers={"Authorization": f"Bearer {reader_token}"}) as r:
        assert r.status == 403
        refused = (await r.json())["error"]
        assert refused["code"] == "insufficient_scope"
        # What to do without the window too (a headless service has no Clients page).
        assert "lmsp-desktop token create --name NAME --scopes admin" in refused["message"]

    async with http.delete(f"/v1/clients/{reader['id']}", headers=admin) as response:
        assert response.status == 200
        assert await response.json() == {"id": reader["id"], "object": "client", "deleted": True}
    async with http.get("/v1/clients", headers={"Authorization": f"Bearer {reader_token}"}) as r:
        assert r.status == 401  # revoked at once

    async with http.delete("/v1/clients/client_nope", headers=admin) as response:
        assert response.status == 404
        assert (await response.json())["error"]["code"] == "client_not_found"
