"""How a stream the stopping service cuts is ended (core/api/stopping.py), on a real store:
a client that does not take the ending is cut off within the bound instead of holding the
stop up, and a task that finished meanwhile gets its own ending, not "left unfinished"."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import Any, cast

from aiohttp import web

from lmsp_desktop.core.api.answering import ShownEvents, ends_with_error
from lmsp_desktop.core.api.responses.request import parse_create
from lmsp_desktop.core.api.responses.routes import responses_view
from lmsp_desktop.core.api.stopping import ENDING_S, end_stopped
from lmsp_desktop.core.service import sse
from lmsp_desktop.core.service.context import ServiceContext
from lmsp_desktop.core.storage.store import Store
from lmsp_desktop.core.storage.tasks import NewTask

MODEL = "smollm2-135m-instruct"


class Transport:
    def __init__(self) -> None:
        self.aborted = False

    def abort(self) -> None:
        self.aborted = True


class Response:
    """A stream's response: what was written, and whether writes ever complete (a client
    that stopped reading: the transport's buffer never drains)."""

    def __init__(self, drains: bool) -> None:
        self.drains = drains
        self.written: list[bytes] = []
        self.eof = False

    async def _drain(self) -> None:
        if not self.drains:
            await asyncio.Event().wait()

    async def write(self, data: bytes) -> None:
        self.written.append(data)
        await self._drain()

    async def write_eof(self, data: bytes = b"") -> None:
        await self._drain()
        self.eof = True


async def a_task(store: Store) -> str:
    request = parse_create({"model": MODEL, "input": "hi", "on_restart": "retry"}, "fail")
    created = await store.tasks.create(NewTask(MODEL, request, on_restart="retry"))
    return created.task_id


async def end(store: Store, task_id: str, response: Response, transport: Transport) -> None:
    ctx = cast(ServiceContext, SimpleNamespace(store=store))
    request = cast(web.Request, SimpleNamespace(transport=transport))
    renderer = ShownEvents(responses_view, ends_with_error, sse.encode)
    stream = cast(web.StreamResponse, response)
    # Well past the bound: without it, this waits for the client for ever.
    await asyncio.wait_for(end_stopped(request, stream, ctx, task_id, 1, renderer), ENDING_S * 10)


async def test_an_ending_the_client_does_not_take_is_cut_off_in_time(store: Store) -> None:
    task_id = await a_task(store)
    response, transport = Response(drains=False), Transport()

    await end(store, task_id, response, transport)

    assert transport.aborted and not response.eof
    [written] = response.written  # the ending was put to the client all the same
    [event] = sse_events(written)
    assert event["type"] == "error" and event["sequence_number"] == 1
    assert event["error"]["code"] == "shutting_down"
    assert f"{task_id} was left unfinished" in event["error"]["message"]
    assert "on_restart policy (retry)" in event["error"]["message"]
    assert (await store.tasks.get(task_id))["state"] == "queued"  # nothing written


async def test_a_task_that_ended_before_the_stop_is_told_its_own_ending(store: Store) -> None:
    """Cancelled (committed) after the stream sent its first event, and the follower closed
    before it read the cancel: the stream ends with the cancel's `error`, not shutting_down."""
    task_id = await a_task(store)
    await store.tasks.cancel(task_id)
    response, transport = Response(drains=True), Transport()

    await end(store, task_id, response, transport)

    assert not transport.aborted and response.eof
    [event] = sse_events(b"".join(response.written))
    assert event["type"] == "error" and event["error"]["code"] == "cancelled", event


def sse_events(raw: bytes) -> list[dict[str, Any]]:
    blocks = raw.decode().split("\n\n")
    assert blocks[-1] == ""
    return [json.loads(block.split("\n")[2][len("data: ") :]) for block in blocks[:-1]]
