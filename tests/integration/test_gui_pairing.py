"""A client pairs over real HTTP; the owner approves it on the real window's Clients page."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from tests.support.polling import until

pytestmark = pytest.mark.gui


async def test_pairing_request_card_approve_and_the_polled_token_works(
    gui_app: tuple[Any, Any],
) -> None:
    core, window = gui_app
    clients = window.clients
    window.nav.setCurrentRow(2)
    assert not clients.cards
    async with aiohttp.ClientSession(core.url) as http:
        async with http.post(
            "/v1/pairing",
            json={"client_name": "Ana's laptop", "scopes": "models:read responses:read"},
        ) as answer:
            started = await answer.json()
            assert answer.status == 200, started
        poll_path = f"/v1/pairing/{started['pairing_id']}/token"
        poll_body = {"pairing_secret": started["pairing_secret"]}
        async with http.post(poll_path, json=poll_body) as answer:
            assert answer.status == 400
            assert (await answer.json())["error"]["code"] == "authorization_pending"

        # The card shows the same code the client shows, and the requested scopes.
        await until(lambda: len(clients.cards) == 1, what="the pairing card")
        card = clients.cards[0]
        assert card.isVisible()
        assert card.code.text() == started["user_code"]
        assert sorted(card.scopes) == ["models:read", "responses:read"]
        assert "(1 waiting)" in window.nav.item(2).text()
        assert clients.model.rowCount() == 0

        card.approve.click()

        await until(lambda: not clients.cards, what="the card to go once approved")
        async with http.post(poll_path, json=poll_body) as answer:
            issued = await answer.json()
            assert answer.status == 200, issued
        token = issued["access_token"]
        async with http.get("/v1/models", headers={"Authorization": f"Bearer {token}"}) as answer:
            models = await answer.json()
            assert answer.status == 200, models
        assert "smollm2-135m-instruct" in [m["id"] for m in models["data"]]

    # The new client is listed as paired, with what it was granted.
    await until(lambda: clients.model.rowCount() == 1, what="the paired client's row")
    shown = [clients.model.index(0, c).data() for c in range(clients.model.columnCount())]
    assert "Ana's laptop" in shown
    assert any("models:read" in str(v) and "responses:read" in str(v) for v in shown)
    assert "waiting" not in window.nav.item(2).text()
