"""The window's calls about clients and pairing (gui/core_api.py's seam): thin delegations to
the pairing manager and the client store. A mixin, so that the real `Core` and the tests'
window core (tests/support/gui_core.py) answer them with the same code over their own store."""

from __future__ import annotations

from typing import Any

from lmsp_desktop.core.pairing import PairingManager
from lmsp_desktop.core.storage import clients as client_store
from lmsp_desktop.core.storage.store import Store


class ClientCalls:
    pairing: PairingManager
    store: Store

    async def pending_pairings(self, *, include_ignored: bool = False) -> list[dict[str, Any]]:
        return await self.pairing.pending(include_ignored=include_ignored)

    async def approve_pairing(self, pairing_id: str, scopes: frozenset[str]) -> None:
        await self.pairing.approve(pairing_id, scopes)

    async def deny_pairing(self, pairing_id: str) -> None:
        await self.pairing.deny(pairing_id)

    async def ignore_pairing(self, pairing_id: str) -> None:
        await self.pairing.ignore(pairing_id)

    async def pairing_outcome(self, pairing_id: str) -> str | None:
        return await self.pairing.outcome(pairing_id)

    async def create_claim_code(self, scopes: frozenset[str]) -> dict[str, Any]:
        return await self.pairing.create_claim_code(scopes)

    async def end_claim_code(self, pairing_id: str) -> None:
        await self.pairing.end_claim_code(pairing_id)

    async def claim_code_status(self, pairing_id: str) -> dict[str, Any]:
        return await self.pairing.claim_code_status(pairing_id)

    async def clients(self) -> list[dict[str, Any]]:
        return await client_store.list_clients(self.store.db, include_revoked=False)

    async def create_client_token(self, name: str, scopes: frozenset[str]) -> str:
        _client, token = await client_store.create_client(self.store.db, name, scopes)
        return token

    async def revoke_client(self, client_id: str) -> None:
        await client_store.revoke_client(self.store.db, client_id)

    async def set_client_scopes(self, client_id: str, scopes: frozenset[str]) -> None:
        await client_store.set_scopes(self.store.db, client_id, scopes)
