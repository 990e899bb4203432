"""A pasted address of a file at another revision than main (`…/blob/v2/x.gguf`,
`…/resolve/<commit>/x.gguf`) pulls that revision's file: the revision was dropped and main's
file downloaded under the name the user pasted. The task keeps the revision and its commit,
so a download picked up after a restart fetches the same bytes. Real store, real download
manager, a real (fake) hub on loopback that serves a second revision of the tiny repo."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from lmsp_desktop.core.downloads.hub import reference_revision
from lmsp_desktop.core.downloads.manager import DownloadManager
from lmsp_desktop.core.downloads.pull import pull
from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.storage.store import Store
from tests.support.fake_hub import FakeHub, HubRepo
from tests.support.hub_repos import TINY_REPO, TINY_SIZE, Hub, finished, hub_repos, pseudo_random

FILE = "tiny-Q8_0.gguf"
V2 = HubRepo(TINY_REPO, {FILE: pseudo_random(TINY_SIZE + 9, "v2")}, commit="2" * 40)
PAGE = f"https://huggingface.co/{TINY_REPO}"


class TwoRevisionHub(FakeHub):
    """The fake hub, with `v2` (a tag, commit 222…2) of the tiny repo holding another Q8_0."""

    def _repo(self, request: web.Request) -> HubRepo:
        if request.match_info.get("rev") in ("v2", V2.commit):
            return V2
        return super()._repo(request)


@pytest.fixture
async def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Hub]:
    server = TwoRevisionHub(hub_repos())
    await server.start()
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    try:
        yield Hub(server, tmp_path / "hf-cache")
    finally:
        await server.stop()


def snapshot_file(hub: Hub, commit: str) -> Path:
    return hub.cache / f"models--{TINY_REPO.replace('/', '--')}" / "snapshots" / commit / FILE


async def test_a_file_address_at_a_tag_pulls_that_revision_after_a_restart_too(
    hub: Hub, tmp_path: Path
) -> None:
    store = Store(tmp_path / "data")
    await store.open()
    task = await pull(store.tasks, f"{PAGE}/blob/v2/{FILE}")
    request = json.loads((await store.tasks.get(task["id"]))["request"])
    assert (request["revision"], request["commit"]) == ("v2", V2.commit)
    await store.close()  # not started yet: the next start picks it up, at the same revision

    store = Store(tmp_path / "data")
    await store.open()
    manager = DownloadManager(store.tasks, progress_every=0.1)
    await manager.start()
    try:
        row = await finished(store, task["id"])
    finally:
        await manager.stop()
        await store.close()
    assert row["state"] == "completed", row["error"]
    assert snapshot_file(hub, V2.commit).read_bytes() == V2.files[FILE]
    main = hub.server.repos[TINY_REPO]
    assert not snapshot_file(hub, main.commit).exists()  # main's file was never fetched
    refs = hub.cache / f"models--{TINY_REPO.replace('/', '--')}" / "refs"
    assert (refs / "v2").read_text() == V2.commit


async def test_a_resolve_address_at_a_commit_and_disagreements(hub: Hub, tmp_path: Path) -> None:
    store = Store(tmp_path / "data")
    await store.open()
    try:
        task = await pull(store.tasks, f"{PAGE}/resolve/{V2.commit}/{FILE}?download=true")
        request = json.loads((await store.tasks.get(task["id"]))["request"])
        assert (request["revision"], request["commit"]) == (V2.commit, V2.commit)
        assert request["files"][0]["size"] == TINY_SIZE + 9  # v2's file, not main's
        # The address's revision and the request's must agree (main, the default, gives way);
        # v2 is that commit: the download under way is joined.
        same = await pull(store.tasks, f"{PAGE}/blob/v2/{FILE}", revision="v2")
        assert same["id"] == task["id"]
        with pytest.raises(LmspError) as disagree:
            await pull(store.tasks, f"{PAGE}/blob/v2/{FILE}", revision="v3")
        assert disagree.value.param == "revision" and "give one of them" in disagree.value.message
        # A revision the hub does not have is refused, not swapped for main.
        with pytest.raises(LmspError) as unknown:
            await pull(store.tasks, f"{PAGE}/blob/v9/{FILE}")
        assert unknown.value.code == "revision_not_found"
        assert "'v9'" in unknown.value.message
    finally:
        await store.close()


async def test_models_pull_of_an_address_at_a_tag_fetches_that_revision(
    hub: Hub, tmp_path: Path
) -> None:
    command = [sys.executable, "-m", "lmsp_desktop", "--data-dir", str(tmp_path / "data")]
    pulled = await asyncio.to_thread(
        subprocess.run,
        [*command, "models", "pull", f"{PAGE}/blob/v2/{FILE}"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert f"Downloading {TINY_REPO}:Q8_0 (task" in pulled.stdout, pulled.stdout + pulled.stderr
    assert snapshot_file(hub, V2.commit).read_bytes() == V2.files[FILE]


def test_the_revision_an_address_names() -> None:
    assert reference_revision(f"{PAGE}/blob/v2/{FILE}") == "v2"
    assert reference_revision(f"hf.co/{TINY_REPO}/resolve/{V2.commit}/{FILE}") == V2.commit
    assert reference_revision(f"{PAGE}/blob/refs%2Fpr%2F1/{FILE}") == "refs/pr/1"
    assert reference_revision(f"{PAGE}/tree/v2") == "v2"
    for names_none in (PAGE, f"hf.co/{TINY_REPO}:Q8_0", f"{TINY_REPO}:{FILE}"):
        assert reference_revision(names_none) is None
