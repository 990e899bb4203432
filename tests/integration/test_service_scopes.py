"""The scope × endpoint matrix, and each client seeing only its own tasks unless admin."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from tests.integration.service_fixtures import (
    MODEL,
    USER_SCOPES,
    Client,
    LiveCore,
    auth,
    body,
    create_background,
    expect_error,
)

pytest_plugins = ["tests.integration.service_fixtures"]

MISSING = "resp_0000000000000000000000ff"
# (method, path, json body, scope needed or None, status when allowed). Ids that do not
# exist answer 404 once the scope check has passed, so no task is created or touched: a 404
# proves the caller got past auth and scope, a 403 that the scope stopped it.
ENDPOINTS: list[tuple[str, str, Any, str | None, int]] = [
    ("GET", "/v1/health", None, None, 200),
    ("GET", "/v1/openapi.json", None, None, 200),
    ("GET", "/v1/models", None, "models:read", 200),
    ("GET", f"/v1/models/{MODEL}", None, "models:read", 200),
    ("POST", "/v1/responses", body(model="no-such-model"), "responses:write", 404),
    ("GET", f"/v1/responses/{MISSING}", None, "responses:read", 404),
    ("GET", f"/v1/responses/{MISSING}?stream=true", None, "responses:read", 404),
    ("POST", f"/v1/responses/{MISSING}/cancel", None, "responses:write", 404),
    ("DELETE", f"/v1/responses/{MISSING}", None, "responses:write", 404),
    ("GET", "/v1/tasks", None, "responses:read", 200),
    ("GET", f"/v1/tasks/{MISSING}", None, "responses:read", 404),
    ("GET", f"/v1/tasks/{MISSING}/events", None, "responses:read", 404),
    ("GET", "/v1/clients", None, "admin", 200),
    ("DELETE", "/v1/clients/client_0000000000000000000000ff", None, "admin", 404),
    ("GET", "/v1/recovery/last", None, "admin", 0),  # 200, or 404 if nothing was recovered
    ("GET", "/v1/metrics", None, "admin", 200),
    # A repo id that is not one: refused with 400 before the hub is asked.
    ("POST", "/v1/models/pull", {"repo": "not a repo"}, "admin", 400),
]
CALLERS = ["models:read", "responses:read", "responses:write", "admin", "no token", "revoked"]


def expected(caller: str, scope: str | None, allowed_status: int) -> int:
    if scope is None:
        return allowed_status
    if caller == "no token" or caller == "revoked":
        return 401
    return allowed_status if caller in (scope, "admin") else 403


@pytest.fixture(scope="module")
def tokens(live: LiveCore) -> dict[str, str | None]:
    found: dict[str, str | None] = {s: live.token(s) for s in CALLERS[:4]}
    found["no token"] = None
    found["revoked"] = live.revoked_token()
    return found


@pytest.mark.parametrize("caller", CALLERS)
@pytest.mark.parametrize(
    ("method", "path", "payload", "scope", "allowed"),
    ENDPOINTS,
    ids=[f"{m} {p}" for m, p, *_ in ENDPOINTS],
)
async def test_scope_matrix(
    http: aiohttp.ClientSession,
    tokens: dict[str, str | None],
    caller: str,
    method: str,
    path: str,
    payload: Any,
    scope: str | None,
    allowed: int,
) -> None:
    token = tokens[caller]
    headers = auth(token) if token else {}
    if allowed == 0:  # the recovery report: whatever the owner sees is what "allowed" means
        async with http.get(path, headers=auth(tokens["admin"] or "")) as r:
            allowed = r.status
        assert allowed in (200, 404)
    want = expected(caller, scope, allowed)
    async with http.request(method, path, json=payload, headers=headers) as r:
        text = await r.text()
        assert r.status == want, (caller, method, path, text)
        if want == 403:
            await expect_error(r, 403, "insufficient_scope")
            assert scope in text  # the message names the missing scope
        elif want == 401:
            await expect_error(r, 401)


async def test_each_client_sees_only_its_own_tasks_unless_admin(
    http: aiohttp.ClientSession, live: LiveCore
) -> None:
    alice, bob = live.client(*USER_SCOPES), live.client(*USER_SCOPES)
    admin = live.client("admin")
    a = await create_background(http, alice.headers)
    b = await create_background(http, bob.headers)

    async def listed(client: Client) -> set[str]:
        async with http.get("/v1/tasks", params={"limit": 100}, headers=client.headers) as r:
            return {t["id"] for t in (await r.json())["data"]}

    assert await listed(alice) == {a["id"]}
    assert await listed(bob) == {b["id"]}
    assert {a["id"], b["id"]} <= await listed(admin)
    async with http.get(f"/v1/tasks/{b['id']}", headers=alice.headers) as r:
        await expect_error(r, 404, "response_not_found")
    for task_id, owner in ((a["id"], alice.id), (b["id"], bob.id)):
        async with http.get(f"/v1/tasks/{task_id}", headers=admin.headers) as r:
            assert r.status == 200 and (await r.json())["client_id"] == owner
    # The admin may cancel another client's task (409 if it already finished).
    async with http.post(f"/v1/responses/{a['id']}/cancel", headers=admin.headers) as r:
        assert r.status in (200, 409)
