"""The one creation path (core/api/creation.py): the app's "Try a prompt…" (Core.submit) and the
HTTP routes refuse, parse, look up and create in the same order, through the same function."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from lmsp_desktop.app import Core
from lmsp_desktop.core.api.creation import IdempotencyInput, create_task
from lmsp_desktop.core.api.responses import INTAKE as RESPONSES
from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.views import TaskFilter
from tests.unit.core.test_models_gguf_meta import write_gguf


@pytest.fixture
async def core(tmp_path: Path) -> AsyncIterator[Core]:
    """An opened Core (store, port bound, recovery, registry; not serving) with one model,
    `tiny`. Port 0: open() binds the port, and 5677 may be another program's."""
    models = tmp_path / "models"
    models.mkdir()
    write_gguf(models / "tiny.gguf")  # a GGUF header: a file that is not one is never run
    opened = Core(
        tmp_path / "data", engine=FakeEngine(), model_dirs=[models], include_demo=False, port=0
    )
    await opened.open()
    await opened.scan_models()
    try:
        yield opened
    finally:
        await opened.stop()


async def stored_ids(core: Core) -> list[str]:
    rows, _ = await core.store.tasks.list_tasks(TaskFilter(), limit=100)
    return [row["id"] for row in rows]


async def test_the_app_submit_creates_a_queued_background_task(core: Core) -> None:
    task_id = await core.submit("tiny", "hello")
    row = await core.store.tasks.get(task_id)
    assert (row["state"], row["mode"], row["client_id"]) == ("queued", "background", None)


async def test_the_app_submit_is_refused_while_shutting_down(core: Core) -> None:
    """The defect of issue 12: "Try a prompt…" took its own path, which skipped this check."""
    core.context.shutting_down = True
    with pytest.raises(LmspError) as refused:
        await core.submit("tiny", "hello")
    assert (refused.value.status, refused.value.code) == (503, "shutting_down")
    assert await stored_ids(core) == []


async def test_the_app_submit_is_refused_while_paused(core: Core) -> None:
    core.pause(True)
    with pytest.raises(LmspError) as refused:
        await core.submit("tiny", "hello")
    assert refused.value.code == "paused"
    assert await stored_ids(core) == []


async def test_an_unknown_model_is_404_before_anything_is_stored(core: Core) -> None:
    with pytest.raises(LmspError) as refused:
        await core.submit("no-such-model", "hello")
    assert (refused.value.status, refused.value.code) == (404, "model_not_found")
    assert await stored_ids(core) == []


async def test_a_paused_service_does_not_read_the_body(core: Core) -> None:
    core.pause(True)
    read: list[bool] = []

    async def read_body() -> object:
        read.append(True)
        return {"model": "tiny", "input": "x"}

    with pytest.raises(LmspError):
        await create_task(core.context, read_body, client_id=None, intake=RESPONSES)
    assert read == []


async def test_a_repeated_idempotency_key_replays_the_first_answer(core: Core) -> None:
    body = {"model": "tiny", "input": "x", "background": True}
    key = IdempotencyInput("key-1")
    first = await create_task(
        core.context, body, client_id="client_a", intake=RESPONSES, idempotency=key
    )
    again = await create_task(
        core.context, body, client_id="client_a", intake=RESPONSES, idempotency=key
    )
    assert not first.replayed and again.replayed
    assert again.task_id == first.task_id and again.result.body["id"] == first.task_id
    assert await stored_ids(core) == [first.task_id]
