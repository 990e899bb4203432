"""Idempotency keys at the store level (LMSP_API.md "Idempotency")."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.storage import creates as creates_module
from lmsp_desktop.core.storage.idempotency import (
    IdempotencyClaim,
    complete_key,
    release_in_flight,
    release_key,
    request_digest,
    validate_key,
)
from lmsp_desktop.core.storage.store import Store
from tests.support.store_helpers import dump, new_task

BODY = {"model": "m", "input": "hi", "background": True}


def claim(key: str = "key-1", client: str = "client_a", body: Any = BODY, **kw: Any) -> Any:
    return IdempotencyClaim(client, key, request_digest("POST", "/v1/responses", body), **kw)


async def task_count(store: Store) -> int:
    return sum((await store.tasks.counts()).values())


async def test_same_key_same_body_replays_without_a_new_task(store: Store) -> None:
    first = await store.tasks.create(new_task(client_id="client_a"), claim())
    again = await store.tasks.create(new_task(client_id="client_a"), claim())
    assert not first.replayed and again.replayed
    assert (again.task_id, again.status, again.body) == (first.task_id, 202, first.body)
    assert await task_count(store) == 1


async def test_same_key_other_body_is_422_and_writes_nothing(store: Store) -> None:
    await store.tasks.create(new_task(client_id="client_a"), claim())
    before = dump(store.db.path)
    with pytest.raises(LmspError) as caught:
        await store.tasks.create(
            new_task(client_id="client_a"), claim(body={**BODY, "input": "other"})
        )
    assert (caught.value.status, caught.value.code) == (422, "idempotency_key_reused")
    assert dump(store.db.path) == before


async def test_key_in_flight_is_409_until_the_answer_is_stored(store: Store) -> None:
    sync = claim(body={**BODY, "background": False})
    first = await store.tasks.create(new_task(mode="sync", client_id="client_a"), sync)
    before = dump(store.db.path)
    with pytest.raises(LmspError) as caught:
        await store.tasks.create(new_task(mode="sync", client_id="client_a"), sync)
    assert (caught.value.status, caught.value.code) == (409, "idempotency_key_in_use")
    assert dump(store.db.path) == before
    final = {"id": first.task_id, "status": "completed"}
    await complete_key(store.db, sync, 200, final)
    replay = await store.tasks.create(new_task(mode="sync", client_id="client_a"), sync)
    assert replay.replayed and (replay.task_id, replay.status, replay.body) == (
        first.task_id,
        200,
        final,
    )
    assert await task_count(store) == 1


async def test_release_key_forgets_only_an_unanswered_key(store: Store) -> None:
    sync = claim(body={**BODY, "background": False})
    await store.tasks.create(new_task(mode="sync", client_id="client_a"), sync)
    await release_key(store.db, sync)
    second = await store.tasks.create(new_task(mode="sync", client_id="client_a"), sync)
    assert not second.replayed and await task_count(store) == 2
    background = claim("key-2")
    done = await store.tasks.create(new_task(client_id="client_a"), background)
    await release_key(store.db, background)  # answered already: kept for replay
    assert (await store.tasks.create(new_task(client_id="client_a"), background)).task_id == (
        done.task_id
    )


async def test_keys_in_flight_are_released_at_startup(data_dir: Path) -> None:
    store = Store(data_dir)
    await store.open()
    sync = claim(body={**BODY, "background": False})
    await store.tasks.create(new_task(mode="sync", client_id="client_a"), sync)
    answered = claim("key-2")
    kept = await store.tasks.create(new_task(client_id="client_a"), answered)
    await store.close()  # the process dies while the sync request is being answered

    store = Store(data_dir)
    await store.open()
    try:
        assert await release_in_flight(store.db) == 1
        retried = await store.tasks.create(new_task(mode="sync", client_id="client_a"), sync)
        assert not retried.replayed
        replay = await store.tasks.create(new_task(client_id="client_a"), answered)
        assert replay.replayed and replay.task_id == kept.task_id
    finally:
        await store.close()


async def test_keys_are_scoped_per_client(store: Store) -> None:
    a = await store.tasks.create(new_task(client_id="client_a"), claim(client="client_a"))
    b = await store.tasks.create(new_task(client_id="client_b"), claim(client="client_b"))
    assert not b.replayed and a.task_id != b.task_id
    # Another client's key with another body is not a reuse either.
    c = await store.tasks.create(
        new_task(client_id="client_c"), claim(client="client_c", body={"x": 1})
    )
    assert not c.replayed
    assert await task_count(store) == 3


async def test_an_expired_key_is_a_new_request(store: Store) -> None:
    first = await store.tasks.create(new_task(client_id="client_a"), claim(ttl_s=0))
    second = await store.tasks.create(new_task(client_id="client_a"), claim(ttl_s=0))
    assert not second.replayed and second.task_id != first.task_id


async def test_key_and_task_are_committed_together(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken_event(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("crash after claiming the key")

    # After the key is claimed and the response and task rows are written.
    monkeypatch.setattr(creates_module, "created_event_row", broken_event)
    with pytest.raises(RuntimeError):
        await store.tasks.create(new_task(client_id="client_a"), claim())
    assert dump(store.db.path)["idempotency_keys"] == []
    monkeypatch.undo()
    created = await store.tasks.create(new_task(client_id="client_a"), claim())
    assert not created.replayed


async def test_many_concurrent_creates_with_one_key_make_one_task(store: Store) -> None:
    results = await asyncio.gather(
        *(store.tasks.create(new_task(client_id="client_a"), claim()) for _ in range(200))
    )
    assert len({r.task_id for r in results}) == 1
    assert sum(not r.replayed for r in results) == 1
    assert all(r.status == 202 for r in results)
    assert await task_count(store) == 1


async def test_many_concurrent_sync_creates_with_one_key(store: Store) -> None:
    sync = claim(body={**BODY, "background": False})
    results = await asyncio.gather(
        *(
            store.tasks.create(new_task(mode="sync", client_id="client_a"), sync)
            for _ in range(200)
        ),
        return_exceptions=True,
    )
    created = [r for r in results if not isinstance(r, BaseException)]
    refused = [r for r in results if isinstance(r, LmspError)]
    assert len(created) == 1 and len(refused) == 199
    assert {r.code for r in refused} == {"idempotency_key_in_use"}
    assert await task_count(store) == 1


def test_digest_is_canonical_and_covers_method_and_path() -> None:
    assert request_digest("POST", "/v1/responses", {"a": 1, "b": [1, 2]}) == request_digest(
        "POST", "/v1/responses", {"b": [1, 2], "a": 1}
    )
    base = request_digest("POST", "/v1/responses", BODY)
    assert base != request_digest("POST", "/v1/responses/x/cancel", BODY)
    assert base != request_digest("PUT", "/v1/responses", BODY)
    assert base != request_digest("POST", "/v1/responses", {**BODY, "input": "hj"})


@pytest.mark.parametrize("key", ["", "é", "x" * 256, "tab\t", "new\nline"])
def test_bad_keys_are_refused_with_a_clear_error(key: str) -> None:
    with pytest.raises(LmspError) as caught:
        validate_key(key)
    assert caught.value.param == "Idempotency-Key"


@pytest.mark.parametrize("key", ["a", "x" * 255, "Az09-_.~!"])
def test_good_keys_are_accepted(key: str) -> None:
    assert validate_key(key) == key


def test_digest_of_a_body_with_a_lone_surrogate() -> None:
    # JSON allows "\ud800"; such a body must still get a stable digest, not crash the request.
    body = {"input": "\ud800 hi"}
    assert request_digest("POST", "/v1/responses", body) == request_digest(
        "POST", "/v1/responses", {"input": "\ud800 hi"}
    )
    assert request_digest("POST", "/v1/responses", body) != request_digest(
        "POST", "/v1/responses", {"input": "\ud801 hi"}
    )
