"""Download tasks against a real HTTP server speaking the hub's protocol, a real store and
the real huggingface_hub: complete, cut and resumed, corrupted, cancelled, gated, picked by
quant or file, split models, and the errors for a typo or a repo without GGUF files."""

from __future__ import annotations

import hashlib
import os
import socket
from pathlib import Path

import pytest
from huggingface_hub import scan_cache_dir, try_to_load_from_cache

from lmsp_desktop.core.downloads.manager import DownloadManager
from lmsp_desktop.core.downloads.pull import pull
from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.storage.recovery import next_boot, recover
from lmsp_desktop.core.storage.store import Store
from tests.support.hub_repos import (
    DEMO_FILE,
    DEMO_REPO,
    GATED_REPO,
    PLAIN_REPO,
    TINY_REPO,
    TINY_SIZE,
    Hub,
    error_of,
    finished,
)
from tests.support.polling import until

pytest_plugins = ["tests.integration.download_fixtures"]


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


async def test_a_pulled_model_lands_in_the_hf_cache_verified_with_its_progress_as_events(
    hub: Hub, store: Store, manager: DownloadManager
) -> None:
    task = await pull(store.tasks, DEMO_REPO)
    assert task["kind"] == "download" and task["state"] == "queued"
    assert task["model"] == f"{DEMO_REPO}:Q4_1"  # as `models pull REPO:Q4_1` names it
    row = await finished(store, task["id"])
    assert row["state"] == "completed", error_of(row)

    source = hub.server.repos[DEMO_REPO].files[DEMO_FILE]
    assert isinstance(source, Path)
    sha = hub.server.repos[DEMO_REPO].sha256(DEMO_FILE)
    commit = hub.server.repos[DEMO_REPO].commit
    snapshot = hub.cache / f"models--{DEMO_REPO.replace('/', '--')}" / "snapshots" / commit
    # As huggingface_hub lays it out: a snapshot link to a blob named by its sha256.
    assert (snapshot / DEMO_FILE).is_symlink()
    assert (snapshot / DEMO_FILE).resolve() == hub.blob_dir(DEMO_REPO) / sha
    assert sha256_of(snapshot / DEMO_FILE) == sha
    assert hub.leftovers(DEMO_REPO) == [f"blobs/{sha}", f"snapshots/{commit}/{DEMO_FILE}"]
    cached = scan_cache_dir(hub.cache)  # other tools see it
    assert [r.repo_id for r in cached.repos] == [DEMO_REPO]
    assert {r.refs for r in next(iter(cached.repos)).revisions} == {frozenset({"main"})}

    events = await store.tasks.events(task["id"])
    types = [e["type"] for e in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-1] == "response.completed"
    progress = [e for e in events if e["type"] == "download.progress"]
    size = source.stat().st_size
    assert progress[-1]["bytes_done"] == progress[-1]["bytes_total"] == size
    done = [p["bytes_done"] for p in progress]
    assert done == sorted(done)
    # Coalesced: a handful of events for 98 MB, not one per chunk.
    assert len(progress) < 200


async def test_a_pull_after_the_repo_moved_on_points_main_at_the_new_commit(
    hub: Hub, store: Store, manager: DownloadManager
) -> None:
    repo = hub.server.repos[TINY_REPO]
    first = await finished(store, (await pull(store.tasks, TINY_REPO, "Q8_0"))["id"])
    assert first["state"] == "completed", error_of(first)
    ref = hub.cache / f"models--{TINY_REPO.replace('/', '--')}" / "refs" / "main"
    assert ref.read_text() == repo.commit
    repo.commit = "f" * 40  # the publisher pushed a new commit
    second = await finished(store, (await pull(store.tasks, TINY_REPO, "Q8_0"))["id"])
    assert second["state"] == "completed", error_of(second)
    # As hf_hub_download leaves it: `main` names the commit fetched last, so the file is
    # found at `main` (the download dialog's "downloaded" mark, other tools' lookups).
    assert ref.read_text() == "f" * 40
    found = try_to_load_from_cache(TINY_REPO, "tiny-Q8_0.gguf", cache_dir=hub.cache)
    assert isinstance(found, str) and f"/snapshots/{'f' * 40}/" in found


async def test_a_stream_cut_mid_way_resumes_from_the_bytes_received(
    hub: Hub, store: Store, manager: DownloadManager
) -> None:
    cut = TINY_SIZE // 2 + 5
    hub.server.cut_at = cut
    task = await pull(store.tasks, TINY_REPO, "Q4_K_M")
    row = await finished(store, task["id"])
    assert row["state"] == "completed", error_of(row)
    assert hub.server.ranges() == [f"bytes={cut}-"]  # continued, did not start over
    sha = hub.server.repos[TINY_REPO].sha256("tiny-Q4_K_M.gguf")
    assert sha256_of(hub.blob_dir(TINY_REPO) / sha) == sha


async def test_a_corrupted_download_fails_and_leaves_nothing_runnable(
    hub: Hub, store: Store, manager: DownloadManager
) -> None:
    hub.server.corrupt = True
    task = await pull(store.tasks, TINY_REPO, "tiny-Q4_K_M.gguf")
    row = await finished(store, task["id"])
    assert row["state"] == "failed"
    error = error_of(row)
    assert error["code"] == "digest_mismatch"
    assert "differs from the digest the hub published" in error["message"]
    assert hub.leftovers(TINY_REPO) == []  # no blob, no partial file, no snapshot link


async def test_cancel_stops_the_transfer_and_removes_the_partial_file(
    hub: Hub, store: Store, manager: DownloadManager
) -> None:
    hub.server.bytes_per_s = 512 * 1024  # ~6 s for the file: still going when cancelled
    task = await pull(store.tasks, TINY_REPO, "Q8_0")

    async def some_bytes() -> bool:
        events = await store.tasks.events(task["id"])
        return any(e.get("bytes_done", 0) > 0 for e in events)

    await until(some_bytes, 30, "the first bytes")
    partial = [p for p in hub.blob_dir(TINY_REPO).iterdir() if p.name.endswith(".incomplete")]
    assert partial, "a partial file while downloading"
    await store.tasks.cancel(task["id"])  # the one cancel transition (HTTP, window alike)
    row = await finished(store, task["id"], 10)
    assert row["state"] == "cancelled"
    assert hub.leftovers(TINY_REPO) == []


async def test_a_split_model_downloads_all_its_parts(
    hub: Hub, store: Store, manager: DownloadManager
) -> None:
    task = await pull(store.tasks, TINY_REPO, "q2_k")
    assert task["model"] == f"{TINY_REPO}:Q2_K"
    row = await finished(store, task["id"])
    assert row["state"] == "completed", error_of(row)
    snapshot = next((hub.cache / f"models--{TINY_REPO.replace('/', '--')}" / "snapshots").iterdir())
    parts = sorted(p.name for p in (snapshot / "split").iterdir())
    assert parts == ["tiny-Q2_K-00001-of-00002.gguf", "tiny-Q2_K-00002-of-00002.gguf"]


async def test_a_typo_lists_the_repo_gguf_files_and_creates_no_task(hub: Hub, store: Store) -> None:
    with pytest.raises(LmspError) as raised:
        await pull(store.tasks, TINY_REPO, "Q4_K_S")
    message = raised.value.message
    assert raised.value.code == "file_not_found"
    assert "tiny-Q4_K_M.gguf" in message and "tiny-Q8_0.gguf" in message
    assert "mmproj" not in message  # projectors are not models
    assert "tiny-Q2_K-00001-of-00002.gguf (2 parts)" in message
    with pytest.raises(LmspError) as ambiguous:
        await pull(store.tasks, TINY_REPO)  # three models: which one?
    assert ambiguous.value.code == "file_ambiguous"
    assert await store.tasks.count() == 0


async def test_a_repo_without_gguf_files_says_so(hub: Hub, store: Store) -> None:
    with pytest.raises(LmspError) as raised:
        await pull(store.tasks, PLAIN_REPO)
    assert raised.value.code == "no_gguf_files"
    assert "has no GGUF files" in raised.value.message
    with pytest.raises(LmspError) as missing:
        await pull(store.tasks, "lmsp-test/no-such-repo")
    assert missing.value.code == "repo_not_found"
    assert await store.tasks.count() == 0


async def test_a_gated_repo_needs_the_token_and_works_with_it(
    hub: Hub, store: Store, manager: DownloadManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    task = await pull(store.tasks, GATED_REPO)
    row = await finished(store, task["id"])
    assert row["state"] == "failed"
    assert error_of(row)["code"] == "repo_gated"
    assert "token" in error_of(row)["message"]

    monkeypatch.setenv("HF_TOKEN", hub.server.token)
    task = await pull(store.tasks, GATED_REPO)
    row = await finished(store, task["id"])
    assert row["state"] == "completed", error_of(row)
    events = str(await store.tasks.events(task["id"]))
    assert hub.server.token not in events  # never in what the service answers


async def test_a_download_left_running_resumes_from_its_partial_file(
    hub: Hub, store: Store, tmp_path: Path
) -> None:
    """The manager stopped mid-transfer (as at a service stop): the task stays running, the
    partial file stays; a new manager (the next start) continues with a Range request."""
    hub.server.bytes_per_s = 1024 * 1024
    first = DownloadManager(store.tasks, progress_every=0.1)
    await first.start()
    task = await pull(store.tasks, TINY_REPO, "Q4_K_M")

    async def halfway() -> bool:
        events = await store.tasks.events(task["id"])
        return any(e.get("bytes_done", 0) > 512 * 1024 for e in events)

    await until(halfway, 30, "half a megabyte")
    await first.stop()
    assert (await store.tasks.get(task["id"]))["state"] == "running"
    partial = next(hub.blob_dir(TINY_REPO).glob("*.incomplete"))
    kept = partial.stat().st_size
    assert kept > 0
    hub.server.bytes_per_s = None
    second = DownloadManager(store.tasks, progress_every=0.1)
    await second.start()
    try:
        row = await finished(store, task["id"])
    finally:
        await second.stop()
    assert row["state"] == "completed", error_of(row)
    assert hub.server.ranges() == [f"bytes={kept}-"]
    assert not os.path.exists(partial)


async def test_pulling_a_file_already_downloading_joins_that_task(
    hub: Hub, store: Store, manager: DownloadManager
) -> None:
    """Download clicked twice (or a script pulling again, by quant or by file name): the
    second pull answers with the task already fetching the file, so the Tasks table shows
    one download and the file is sent once."""
    hub.server.bytes_per_s = 2 * 1024 * 1024
    first = await pull(store.tasks, TINY_REPO, "Q4_K_M")
    second = await pull(store.tasks, TINY_REPO, "Q4_K_M")
    by_name = await pull(store.tasks, TINY_REPO, "tiny-Q4_K_M.gguf")
    assert second["id"] == first["id"] == by_name["id"]
    other = await pull(store.tasks, TINY_REPO, "Q8_0")  # another file: its own task
    assert other["id"] != first["id"]
    rows = [await finished(store, t["id"]) for t in (first, other)]
    assert [r["state"] for r in rows] == ["completed", "completed"], [error_of(r) for r in rows]
    assert await store.tasks.count() == 2
    gets = [p for m, p, _ in hub.server.requests if m == "GET" and "/resolve/" in p]
    assert sorted(p.rsplit("/", 1)[1] for p in gets) == ["tiny-Q4_K_M.gguf", "tiny-Q8_0.gguf"]
    sha = hub.server.repos[TINY_REPO].sha256("tiny-Q4_K_M.gguf")
    assert sha256_of(hub.blob_dir(TINY_REPO) / sha) == sha
    again = await pull(store.tasks, TINY_REPO, "Q4_K_M")  # ended: a new pull is a new task
    assert again["id"] != first["id"]


@pytest.mark.parametrize("policy", ["fail", "retry"])
async def test_recovery_applies_a_download_policy_and_the_bytes_on_disk_are_kept(
    hub: Hub, store: Store, policy: str
) -> None:
    """Table 11.3 for a download left running: `fail` fails it with server_restarted and a
    later pull of the file continues from its bytes; `retry` requeues it and the next start
    continues from them too. Through the same recovery code as any task."""
    hub.server.bytes_per_s = 1024 * 1024
    first = DownloadManager(store.tasks, progress_every=0.1)
    await first.start()
    task = await pull(store.tasks, TINY_REPO, "Q4_K_M", on_restart=policy)

    async def some_bytes() -> bool:
        events = await store.tasks.events(task["id"])
        return any(e.get("bytes_done", 0) > 256 * 1024 for e in events)

    await until(some_bytes, 30, "some bytes")
    await first.stop()  # as at a service stop: the task is left running
    kept = next(hub.blob_dir(TINY_REPO).glob("*.incomplete")).stat().st_size
    report = await recover(store.tasks, await next_boot(store.tasks))
    [item] = report.items
    assert (item.task_id, item.state_before) == (task["id"], "running")
    hub.server.bytes_per_s = None
    second = DownloadManager(store.tasks, progress_every=0.1)
    await second.start()
    try:
        if policy == "fail":
            row = await store.tasks.get(task["id"])
            assert (row["state"], error_of(row)["code"]) == ("failed", "server_restarted")
            task = await pull(store.tasks, TINY_REPO, "Q4_K_M")  # pulled again by the user
        else:
            assert item.state_after == "queued"
        row = await finished(store, task["id"])
    finally:
        await second.stop()
    assert row["state"] == "completed", error_of(row)
    assert hub.server.ranges() == [f"bytes={kept}-"]  # continued, both ways


async def test_an_unreachable_hub_says_so_and_creates_no_task(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    with pytest.raises(LmspError) as raised:
        await pull(store.tasks, TINY_REPO, "Q4_K_M")
    assert raised.value.code == "hub_unreachable"
    assert "cannot be reached (Connection refused)" in raised.value.message
    assert await store.tasks.count() == 0
