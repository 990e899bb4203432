"""The start order of the window's launch and `serve` (Core.start_service): the service
listens and runs its queue while the model scan records and hashes the files in the
background, and a task for a model the scan has not settled yet waits for it instead of
failing. A real core, a real data folder, the real demo model through llama.cpp."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from lmsp_desktop.app import Core
from lmsp_desktop.core.api.creation import create_task
from lmsp_desktop.core.api.responses import INTAKE as RESPONSES
from lmsp_desktop.core.models import hashing
from lmsp_desktop.core.models.digests import sha256_file as real_sha256_file
from lmsp_desktop.core.models.info import MISSING, VERIFIED
from lmsp_desktop.core.models.sources import SOURCES
from lmsp_desktop.core.states import TERMINAL
from tests.support.model_stores import demo, place
from tests.support.polling import until

MODEL = "smol"
PROMPT = "Say hello."


def make_core(data: Path, models: Path) -> Core:
    # Only the model folder: the machine's LM Studio, Ollama and Hugging Face stores stay out.
    return Core(data, model_dirs=[models], port=0, include_demo=False, no_sources=list(SOURCES))


async def submit(core: Core) -> str:
    body = {"model": MODEL, "input": PROMPT, "max_output_tokens": 8, "background": True}
    body["on_restart"] = "retry"  # left queued by a quit, it stays queued at the next start
    return (await create_task(core.context, body, client_id=None, intake=RESPONSES)).task_id


async def test_queued_tasks_wait_for_the_scan_after_a_restart_instead_of_failing(
    tmp_path: Path,
) -> None:
    models = tmp_path / "models"
    model_file = place(demo(), models / f"{MODEL}.gguf")
    data = tmp_path / "data"

    # The last run: the model verified, three tasks queued, and the app quit before running
    # them while the model folder was away (an unplugged drive: the model is `missing`).
    core = make_core(data, models)
    await core.open()
    await core.scan_models()
    assert (await core.registry.get(MODEL)).state == VERIFIED
    left = [await submit(core) for _ in range(3)]
    away = tmp_path / "away.gguf"
    os.rename(model_file, away)
    await core.rescan_models()
    assert (await core.registry.get(MODEL)).state == MISSING
    await core.stop()

    # Back in place with its size and mtime: the next start's scan hashes it again, and the
    # queue runs from the start, beside the scan.
    os.rename(away, model_file)
    core = make_core(data, models)
    try:
        await core.start()  # what `lmsp-desktop serve` and the window's launch run
        left.append(await submit(core))  # created while the file is still being checked

        async def settled() -> list[object] | None:
            rows = [await core.store.tasks.get(task_id) for task_id in left]
            if all(row["state"] in TERMINAL for row in rows):
                return rows
            return None

        rows = await until(settled, limit=180, what="the queued tasks to end")
        # Run, not failed (model_missing or model_unverified before the scan had settled).
        outcome = {row["id"]: row["error"] for row in rows}  # type: ignore[index]
        assert outcome == dict.fromkeys(left)
        assert {row["state"] for row in rows} <= {"completed", "incomplete"}  # type: ignore[index]
        assert (await core.registry.get(MODEL)).state == VERIFIED
        assert all(row["output_text"] for row in rows)  # type: ignore[index]
    finally:
        await core.stop()


async def test_a_folder_added_is_kept_even_if_the_app_quits_while_hashing_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Walked: Models › Add folder… with an 8 GiB file, three tasks queued for it, Quit while
    it hashed: at the next start the folder was gone from the settings, the model 'missing'
    and the tasks failed model_missing (the folder was saved only after the hash)."""
    # A first hash on this machine: not the digest another test's service kept (digest_cache).
    monkeypatch.setenv("LMSP_CACHE_DIR", str(tmp_path / "cache"))
    models = tmp_path / "models"
    place(demo(), models / f"{MODEL}.gguf")
    data = tmp_path / "data"
    release = threading.Event()

    def held(*args: Any, **kwargs: Any) -> str:
        release.wait(timeout=60)  # still hashing when the app quits
        return real_sha256_file(*args, **kwargs)

    core = Core(data, port=0, include_demo=False, no_sources=list(SOURCES))
    await core.start()
    try:
        monkeypatch.setattr(hashing, "sha256_file", held)
        await asyncio.wait_for(core.add_model_folder(models), timeout=30)  # not the hash
        left = await submit(core)
    finally:
        release.set()
        await core.stop()
    monkeypatch.undo()

    core = Core(data, port=0, include_demo=False, no_sources=list(SOURCES))
    try:
        await core.start()
        assert str(models.resolve()) in core.stored_settings.model_dirs
        row = await until(lambda: core.store.tasks.get(left), what="the task")
        assert row["state"] == "queued"

        async def ended() -> Any:
            row = await core.store.tasks.get(left)
            return row if row["state"] in TERMINAL else None

        row = await until(ended, limit=180, what="the task to end")
        assert row["error"] is None, row["error"]  # was model_missing
        assert (await core.registry.get(MODEL)).state == VERIFIED
    finally:
        await core.stop()
