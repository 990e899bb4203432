"""`POST /v1/models/{id}/verify` and `POST /v1/models/rescan` on a real served Core (real
SQLite file, real copies of the demo model, real HTTP): what the window's Verify selected and
Rescan do, for a headless user whose model was refused as changed or missing."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from lmsp_desktop.core.models.demo import demo_model_path
from tests.integration.service_fixtures import LiveCore, auth, expect_error
from tests.support.polling import until_sync

pytest_plugins = ["tests.integration.service_fixtures"]

CUT_SIZE = 49_181_216  # the reviewer's `truncate -s 49181216`: half the demo's tensors
COPIES = ("good", "cut", "gone", "rewritten")


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("verify-models")


@pytest.fixture(scope="module")
def served(folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveCore]:
    demo = demo_model_path()
    assert demo is not None
    for name in COPIES:
        shutil.copyfile(demo, folder / f"{name}.gguf")
    running = LiveCore(tmp_path_factory.mktemp("verify-core"), model_dirs=[folder])

    def verified() -> bool:
        states = {m.id: m.state for m in running.call(running.core.registry.list_models())}
        return all(states.get(name) == "verified" for name in COPIES)

    until_sync(verified, 60, "the copies to be verified", 0.05)
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
async def http(served: LiveCore) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(
        base_url=served.url, timeout=aiohttp.ClientTimeout(total=120)
    ) as session:
        yield session


@pytest.fixture(scope="module")
def admin(served: LiveCore) -> dict[str, str]:
    return auth(served.token("admin"))


@pytest.fixture(scope="module")
def user(served: LiveCore) -> dict[str, str]:
    return auth(served.token("models:read", "responses:read", "responses:write"))


def ask(model: str) -> dict[str, Any]:
    return {"model": model, "input": "Say hi.", "max_output_tokens": 4, "temperature": 0}


def cut(path: Path) -> None:
    os.truncate(path, CUT_SIZE)


def put_back(path: Path) -> None:
    demo = demo_model_path()
    assert demo is not None
    shutil.copyfile(demo, path)  # the identical bytes, a new modification time


async def test_verify_makes_a_model_refused_as_changed_run_again(
    http: aiohttp.ClientSession, folder: Path, admin: dict[str, str], user: dict[str, str]
) -> None:
    """Case A: cut, then the identical file copied back: `changed` until verified on purpose,
    and now a headless user can: the route re-hashes it as Verify selected does."""
    async with http.get("/v1/models/good", headers=user) as r:
        digest = (await r.json())["digest"]
    cut(folder / "good.gguf")
    async with http.post("/v1/responses", json=ask("good"), headers=user) as r:
        error = await expect_error(r, 409, "model_changed")
    assert "`lmsp-desktop models verify good`" in error["message"]
    put_back(folder / "good.gguf")
    async with http.post("/v1/responses", json=ask("good"), headers=user) as r:
        await expect_error(r, 409, "model_changed")  # the same bytes, but not verified yet
    async with http.post("/v1/models/good/verify", headers=user) as r:
        await expect_error(r, 403, "insufficient_scope")  # admin, as pull
    async with http.post("/v1/models/good/verify", headers=admin) as r:
        assert r.status == 200, await r.text()
        model = await r.json()
    assert model["id"] == "good" and model["object"] == "model"
    assert model["state"] in ("unloaded", "loaded")  # runnable: not changed
    assert model["digest"] == digest and model["verified_at"] is not None
    assert "observed_digest" not in model
    async with http.post("/v1/responses", json=ask("good"), headers=user) as r:
        assert r.status == 200, await r.text()
        assert (await r.json())["status"] in ("completed", "incomplete")


async def test_verify_of_a_cut_file_says_changed_and_accepting_it_says_invalid(
    http: aiohttp.ClientSession, folder: Path, admin: dict[str, str]
) -> None:
    cut(folder / "cut.gguf")
    async with http.post("/v1/models/cut/verify", headers=admin) as r:
        assert r.status == 200, await r.text()
        model = await r.json()
    assert model["state"] == "changed"
    assert model["observed_digest"].startswith("sha256:")
    assert model["observed_digest"] != model["digest"]
    # Why the file now on disk is no model, and its size: no candidate to accept as new.
    assert "shorter than its tensors need" in model["observed_error"]
    assert model["observed_size_bytes"] < model["size_bytes"]
    async with http.get("/v1/models/cut", headers=admin) as r:
        assert (await r.json())["observed_error"] == model["observed_error"]
    async with http.post("/v1/models/cut/verify", json={"accept_new": True}, headers=admin) as r:
        assert r.status == 200, await r.text()
        model = await r.json()
    assert model["state"] == "invalid"
    assert "shorter than its tensors need" in model["reason"]


async def test_accepting_a_file_replaced_on_purpose_makes_it_the_models(
    http: aiohttp.ClientSession, folder: Path, admin: dict[str, str]
) -> None:
    path = folder / "rewritten.gguf"
    with path.open("r+b") as f:  # other weights, the same complete GGUF layout
        f.seek(-1, os.SEEK_END)
        last = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([last[0] ^ 0xFF]))
    async with http.post("/v1/models/rewritten/verify", headers=admin) as r:
        before = await r.json()
    assert before["state"] == "changed", before
    async with http.post(
        "/v1/models/rewritten/verify", json={"accept_new": True}, headers=admin
    ) as r:
        assert r.status == 200, await r.text()
        accepted = await r.json()
    assert accepted["state"] in ("unloaded", "loaded")
    assert accepted["digest"] == before["observed_digest"]


async def test_verify_refuses_what_it_cannot_do(
    http: aiohttp.ClientSession, admin: dict[str, str]
) -> None:
    async with http.post("/v1/models/nothing-here/verify", headers=admin) as r:
        await expect_error(r, 404, "model_not_found", "model")
    async with http.post("/v1/models/good/verify", json=["x"], headers=admin) as r:
        await expect_error(r, 400)
    async with http.post("/v1/models/good/verify", json={"accept_new": "yes"}, headers=admin) as r:
        await expect_error(r, 400, param="accept_new")
    async with http.post("/v1/models/good/verify", json={"force": True}, headers=admin) as r:
        await expect_error(r, 400, param="force")
    async with http.post("/v1/models/good/verify") as r:
        await expect_error(r, 401)
    # Only POST, as the OpenAPI document says (not a lookup of a model named "good/verify").
    for path in ("/v1/models/good/verify", "/v1/models/rescan"):
        async with http.get(path, headers=admin) as r:
            assert r.status == 405, (path, await r.text())
            assert r.headers["Allow"] == "POST"


async def test_rescan_lists_a_file_put_back_and_it_runs_again(
    http: aiohttp.ClientSession, folder: Path, admin: dict[str, str], user: dict[str, str]
) -> None:
    path = folder / "gone.gguf"
    path.unlink()
    async with http.post("/v1/responses", json=ask("gone"), headers=user) as r:
        error = await expect_error(r, 409, "model_missing")
    assert "`lmsp-desktop models rescan`" in error["message"]
    put_back(path)
    async with http.post("/v1/models/rescan", headers=user) as r:
        await expect_error(r, 403, "insufficient_scope")
    async with http.post("/v1/models/rescan", headers=admin) as r:
        assert r.status == 200, await r.text()
        listed = await r.json()
    assert listed["object"] == "list"
    gone = next(m for m in listed["data"] if m["id"] == "gone")
    assert gone["state"] in ("unloaded", "loaded") and gone["verified_at"] is not None
