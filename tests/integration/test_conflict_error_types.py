"""Every 409 says `conflict_error`, whichever path gives it. A request refused at admission
because its model's file changed answered `conflict_error`; the same request queued a moment
earlier, whose task then failed with model_changed while its client waited, answered 409 with
`invalid_request_error`, and a sync chat completion cancelled while it waited answered 409
`invalid_request_error` too. The openai SDK raises ConflictError for both (it picks the class
by status); the body's type is what the user reads. A real Core (real SQLite, real HTTP on
loopback) with the FakeEngine, asked through the openai SDK as a client asks it."""

from __future__ import annotations

import asyncio
import os
import struct
import threading
from pathlib import Path
from typing import Any

import openai
import pytest

from lmsp_desktop.app import Core
from lmsp_desktop.core.engines.fake import FakeEngine
from tests.support.fake_core import session, token
from tests.support.lifecycle import started
from tests.support.polling import until

# A GGUF v3 header with no tensors: a file the registry accepts as a model (FakeEngine runs it).
HEADER = b"GGUF" + struct.pack("<IQQ", 3, 0, 0)


def conflict_of(raised: BaseException | Any) -> dict[str, Any]:
    """The error object of the openai SDK's ConflictError (the 409's body, as the SDK
    hands it to the user), with its status checked."""
    assert isinstance(raised, openai.ConflictError), repr(raised)
    assert raised.status_code == 409
    assert isinstance(raised.body, dict), raised.body
    return raised.body


async def test_every_409_answers_conflict_error(tmp_path: Path) -> None:
    models = tmp_path / "models"
    models.mkdir()
    model_file = models / "tiny.gguf"
    model_file.write_bytes(HEADER + os.urandom(4096))
    engine = FakeEngine()
    engine.gate = threading.Semaphore(0)  # every task is held running until released
    core = Core(tmp_path / "data", port=0, engine=engine, model_dirs=[models], include_demo=False)
    async with started(core) as core:
        secret = await token(core)
        client = openai.AsyncOpenAI(base_url=f"{core.url}/v1", api_key=secret, max_retries=0)
        async with session(core, secret) as http, client:

            async def tasks_in(*states: str) -> list[dict[str, Any]]:
                async with http.get(f"/v1/tasks?state={','.join(states)}") as r:
                    return list((await r.json())["data"])

            async def verified() -> bool:  # hashed in the background after the start
                async with http.get("/v1/models/tiny") as r:
                    return bool((await r.json())["verified_at"])

            await until(verified, what="the model's digest")
            # The file changes under the service, not rescanned yet: the two sync requests are
            # admitted, and their tasks fail with model_changed when the runner checks the file
            # before loading it, while their clients wait.
            model_file.write_bytes(HEADER + os.urandom(8192))  # another file, same name
            responses = client.responses.create(model="tiny", input="x")
            chat = client.chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": "x"}]
            )
            waited = await asyncio.gather(responses, chat, return_exceptions=True)
            assert engine.requests == [], "the changed file was run"

            # Both queued tasks failed with model_changed: their clients read conflict_error,
            # as the request refused at admission now does.
            for raised in waited:
                error = conflict_of(raised)
                assert (error["type"], error["code"]) == ("conflict_error", "model_changed")
                assert "changed since it was verified" in error["message"]
                assert "(task " in error["message"]  # its task's failure, not a refusal
            with pytest.raises(openai.ConflictError) as refused:
                await client.responses.create(model="tiny", input="x")
            error = conflict_of(refused.value)
            assert (error["type"], error["code"]) == ("conflict_error", "model_changed")
            with pytest.raises(openai.ConflictError) as refused:  # POST /v1/models/tiny/load
                await client.post("/models/tiny/load", cast_to=object)
            assert conflict_of(refused.value)["type"] == "conflict_error"

            # Cancelling a finished task: 409 task_not_cancellable.
            failed = (await tasks_in("failed"))[0]
            with pytest.raises(openai.ConflictError) as refused:
                await client.post(f"/tasks/{failed['id']}/cancel", cast_to=object)
            error = conflict_of(refused.value)
            assert (error["type"], error["code"]) == ("conflict_error", "task_not_cancellable")

            # A sync chat completion cancelled while it waits: 409 cancelled.
            async with http.post("/v1/models/tiny/verify", json={"accept_new": True}) as r:
                assert r.status == 200, await r.text()
            chat = asyncio.create_task(
                client.chat.completions.create(
                    model="tiny", messages=[{"role": "user", "content": "x"}]
                )
            )
            [running] = await until(
                lambda: _count(tasks_in("running"), 1), what="the chat completion running"
            )
            async with http.post(f"/v1/tasks/{running['id']}/cancel") as r:
                assert r.status == 200, await r.text()
            [raised] = await asyncio.gather(chat, return_exceptions=True)
            error = conflict_of(raised)
            assert (error["type"], error["code"]) == ("conflict_error", "cancelled")

            # A sync request holding its Idempotency-Key while it waits: the same request
            # again is 409 idempotency_key_in_use, and deleting its unfinished response 409
            # task_not_finished.
            keyed = {"Idempotency-Key": "k"}
            holder = asyncio.create_task(
                client.responses.create(model="tiny", input="y", extra_headers=keyed)
            )
            [waiting] = await until(
                lambda: _count(tasks_in("running"), 1), what="the keyed request running"
            )
            with pytest.raises(openai.ConflictError) as refused:
                await client.responses.create(model="tiny", input="y", extra_headers=keyed)
            error = conflict_of(refused.value)
            assert (error["type"], error["code"]) == ("conflict_error", "idempotency_key_in_use")
            with pytest.raises(openai.ConflictError) as refused:
                await client.responses.delete(waiting["id"])
            error = conflict_of(refused.value)
            assert (error["type"], error["code"]) == ("conflict_error", "task_not_finished")
            engine.gate.release(1000)
            assert (await holder).status == "completed"


async def _count(listed: Any, n: int) -> list[dict[str, Any]] | None:
    """The tasks listed, once there are `n` of them."""
    tasks = await listed
    return tasks if len(tasks) == n else None
