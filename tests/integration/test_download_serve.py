"""Downloads through the real `serve` process and the real CLI: `POST /v1/models/pull`
(admin only), a `kill -9` mid-download resumed after the restart from the bytes on disk,
`models pull` through the running service and without one, and a disk that fills."""

from __future__ import annotations

import asyncio
import resource
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.serve_process import ServeProcess, call, create_token
from tests.support.fake_hub import FakeHub
from tests.support.hub_repos import DEMO_FILE, DEMO_REPO, GATED_REPO, TINY_REPO, Hub, hub_repos
from tests.support.polling import until

pytestmark = pytest.mark.slow


@pytest.fixture
async def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Hub]:
    server = FakeHub(hub_repos())
    await server.start()
    cache = tmp_path / "hf-cache"
    # Inherited by the serve and CLI processes the tests start.
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("LMSP_TOKEN", raising=False)
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyring.backends.fail.Keyring")
    try:
        yield Hub(server, cache)
    finally:
        await server.stop()


def lmsp_cli(data_dir: Path, *args: str, limit_file_size: int | None = None) -> Any:
    def limits() -> None:
        if limit_file_size is not None:  # a disk that fills: writes past this size fail
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit_file_size, limit_file_size))

    return subprocess.run(
        [sys.executable, "-m", "lmsp_desktop", "--data-dir", str(data_dir), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        preexec_fn=limits,
    )


async def api(url: str, token: str, method: str = "GET", body: Any = None) -> tuple[int, Any]:
    return await asyncio.to_thread(call, url, token, method, body)


async def test_a_download_killed_with_kill_9_resumes_after_the_restart_from_the_bytes_on_disk(
    hub: Hub, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    admin = await asyncio.to_thread(create_token, data_dir, "admin")
    user = await asyncio.to_thread(create_token, data_dir, "models:read,responses:read")
    serve = ServeProcess(data_dir)
    url = await asyncio.to_thread(serve.start)
    hub.server.bytes_per_s = 6 * 1024 * 1024  # the demo's 98 MB take ~16 s: killed mid-way
    try:
        status, refused = await api(f"{url}/v1/models/pull", user, "POST", {"repo": DEMO_REPO})
        assert status == 403, refused
        status, task = await api(f"{url}/v1/models/pull", admin, "POST", {"repo": DEMO_REPO})
        assert status == 202, task
        assert task["kind"] == "download" and task["on_restart"] == "resume"

        async def bytes_done() -> int:
            _, page = await api(f"{url}/v1/tasks/{task['id']}/events?limit=1000", admin)
            done = [e["bytes_done"] for e in page["data"] if e["type"] == "download.progress"]
            return done[-1] if done and done[-1] > 8_000_000 else 0

        seen = await until(bytes_done, 60, "8 MB downloaded")
        await asyncio.to_thread(serve.kill)
    except BaseException:
        if serve.proc and serve.proc.poll() is None:
            await asyncio.to_thread(serve.kill)
        raise
    partial = next(hub.blob_dir(DEMO_REPO).glob("*.incomplete"))
    kept = partial.stat().st_size
    assert kept >= seen
    hub.server.bytes_per_s = None
    hub.server.requests.clear()

    serve = ServeProcess(data_dir)
    url = await asyncio.to_thread(serve.start)
    try:

        async def finished() -> Any:
            _, current = await api(f"{url}/v1/tasks/{task['id']}", admin)
            return current if current["state"] in ("completed", "failed") else None

        current = await until(finished, 90, "the resumed download to finish")
        assert current["state"] == "completed", current["error"]
        assert current["restarts"] == 1
        # It went on from the bytes on disk, not from the start.
        assert hub.server.ranges() == [f"bytes={kept}-"]
        _, report = await api(f"{url}/v1/recovery/last", admin)
        mine = [i for i in report["items"] if i["task_id"] == task["id"]]
        assert mine and mine[0]["event_type"] == "response.resumed"
        _, page = await api(f"{url}/v1/tasks/{task['id']}/events?limit=1000", admin)
        last = [e for e in page["data"] if e["type"] == "download.progress"][-1]
        size = hub.server.repos[DEMO_REPO].size(DEMO_FILE)
        assert last["bytes_done"] == last["bytes_total"] == size
        assert not list(hub.blob_dir(DEMO_REPO).glob("*.incomplete"))

        # The rescan after the download lists it from the Hugging Face cache, and it runs.
        async def listed() -> Any:
            _, models = await api(f"{url}/v1/models", admin)
            return next((m for m in models["data"] if m.get("source") == "huggingface"), None)

        model = await until(listed, 60, "the downloaded model in /v1/models")
        assert DEMO_REPO.split("/")[1].lower() in model["id"].lower()
        body = {"model": model["id"], "input": "Say hi.", "max_output_tokens": 8}
        status, answer = await api(f"{url}/v1/responses", admin, "POST", {**body, "temperature": 0})
        assert status == 200, answer
        assert answer["status"] in ("completed", "incomplete") and answer["output_text"]
    finally:
        await asyncio.to_thread(serve.terminate)


async def test_models_pull_is_a_task_of_the_running_service(hub: Hub, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    admin = await asyncio.to_thread(create_token, data_dir, "admin")
    serve = ServeProcess(data_dir)
    url = await asyncio.to_thread(serve.start)
    try:
        done = await asyncio.to_thread(lmsp_cli, data_dir, "models", "pull", f"{TINY_REPO}:Q4_K_M")
        # Downloaded whole; its bytes are no GGUF (test data): the pull says it cannot run.
        assert done.returncode == 1, done.stdout + done.stderr
        assert "lmsp-test/tiny-gguf:q4_k_m: invalid: " in done.stderr
        _, tasks = await api(f"{url}/v1/tasks", admin)
        downloads = [t for t in tasks["data"] if t["kind"] == "download"]
        assert [(t["model"], t["state"]) for t in downloads] == [
            (f"{TINY_REPO}:Q4_K_M", "completed")
        ]
        # The command's one-off admin client is revoked when it ends.
        _, clients = await api(f"{url}/v1/clients", admin)
        assert [c["name"] for c in clients["data"] if not c.get("revoked")] == ["tests"]
        # Idempotency-Key, as on every POST: a retry replays the 202, no second task.
        body = {"repo": TINY_REPO, "quant": "Q8_0"}
        key = {"Idempotency-Key": "pull-q8-once"}
        first = await asyncio.to_thread(call, f"{url}/v1/models/pull", admin, "POST", body, key)
        again = await asyncio.to_thread(call, f"{url}/v1/models/pull", admin, "POST", body, key)
        assert first[0] == again[0] == 202
        assert first[1]["id"] == again[1]["id"]
        other = {**body, "quant": "Q4_K_M"}
        reused = await asyncio.to_thread(call, f"{url}/v1/models/pull", admin, "POST", other, key)
        assert reused[0] == 422 and reused[1]["error"]["code"] == "idempotency_key_reused"
        _, tasks = await api(f"{url}/v1/tasks", admin)
        assert sum(t["kind"] == "download" for t in tasks["data"]) == 2

        typo = await asyncio.to_thread(lmsp_cli, data_dir, "models", "pull", f"{TINY_REPO}:Q5")
        assert typo.returncode == 2
        assert "tiny-Q4_K_M.gguf" in typo.stderr and "tiny-Q8_0.gguf" in typo.stderr
    finally:
        await asyncio.to_thread(serve.terminate)


async def test_models_pull_without_a_service_downloads_itself(hub: Hub, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    done = await asyncio.to_thread(lmsp_cli, data_dir, "models", "pull", f"{TINY_REPO}:q8_0")
    assert done.returncode == 1, done.stderr  # downloaded; no GGUF (test data): cannot run
    assert "lmsp-test/tiny-gguf:q8_0: invalid: " in done.stderr
    sha = hub.server.repos[TINY_REPO].sha256("tiny-Q8_0.gguf")
    assert (hub.blob_dir(TINY_REPO) / sha).is_file()
    empty = await asyncio.to_thread(
        lmsp_cli, data_dir, "models", "pull", "lmsp-test/tiny-safetensors"
    )
    assert empty.returncode == 2
    assert "has no GGUF files" in empty.stderr


async def test_a_file_too_large_for_the_file_system_fails_clearly_and_leaves_nothing(
    hub: Hub, tmp_path: Path
) -> None:
    """RLIMIT_FSIZE in the child (portable; no mount needed): a write past 2 MB fails with
    EFBIG as one past 4 GB on FAT32 does, after the up-front free-space check passed (a
    full disk's ENOSPC: test_download_writes)."""
    data_dir = tmp_path / "data"
    done = await asyncio.to_thread(
        lmsp_cli,
        data_dir,
        "models",
        "pull",
        f"{TINY_REPO}:Q4_K_M",
        limit_file_size=2 * 1024 * 1024,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    # EFBIG, as FAT32 past 4 GB gives: the file system's limit, not a full disk.
    assert "too large for the file system of the Hugging Face cache" in done.stderr
    assert "is full" not in done.stderr and "HF_HUB_CACHE" in done.stderr
    assert done.stderr.count("too large") == 1  # said once, in the command's words
    log = (data_dir / "logs" / "lmsp-desktop.log").read_text()  # and its end in the log
    assert f"({TINY_REPO}:Q4_K_M) failed: file_too_large: " in log
    assert hub.leftovers(TINY_REPO) == []  # no partial file, no blob, no link
    listed = await asyncio.to_thread(lmsp_cli, data_dir, "models", "pull", f"{TINY_REPO}:Q4_K_M")
    assert "Downloaded " in listed.stderr, listed.stderr  # with room again it completes
    assert "too large" not in listed.stderr  # (its test bytes are no GGUF: it cannot run)


async def test_a_model_pulled_again_after_its_cache_folder_was_deleted_runs(
    hub: Hub, tmp_path: Path
) -> None:
    """Case B of the review: pull, `rm -rf` the repo's cache folder, pull again. The new file
    lands where the old one was, checked against the hub's digest by the download: the model
    is read as a new file and runs, instead of staying `changed` (refused 409) for good; with
    the service running, across its restart, and with the pull done without a service."""
    data_dir = tmp_path / "data"
    admin = await asyncio.to_thread(create_token, data_dir, "admin")
    folder = hub.blob_dir(DEMO_REPO).parent

    async def pulled(url: str, after: int) -> dict[str, Any]:
        """The pulled model once the service has settled it after the pull's end: verified
        afresh (verified_at past `after`), or refused as changed."""

        async def settled() -> Any:
            _, models = await api(f"{url}/v1/models", admin)
            found = [m for m in models["data"] if m.get("source") == "huggingface"]
            if found and (found[0]["state"] == "changed" or (found[0]["verified_at"] or 0) > after):
                return found[0]
            return None

        model: dict[str, Any] = await until(settled, 60, "the pulled model to be checked")
        return model

    async def runs(url: str, model_id: str) -> None:
        body = {"model": model_id, "input": "Say hi.", "max_output_tokens": 4, "temperature": 0}
        status, answer = await api(f"{url}/v1/responses", admin, "POST", body)
        assert status == 200, answer
        assert answer["status"] in ("completed", "incomplete")

    async def next_second(after: int) -> None:
        await until(lambda: time.time() >= after + 1, 5, "the next second")  # verified_at: s

    serve = ServeProcess(data_dir)
    url = await asyncio.to_thread(serve.start)
    try:
        done = await asyncio.to_thread(lmsp_cli, data_dir, "models", "pull", DEMO_REPO)
        assert done.returncode == 0, done.stderr
        first = await pulled(url, 0)
        assert first["state"] != "changed" and first["digest_matches"] is True
        await asyncio.to_thread(shutil.rmtree, folder)
        await next_second(first["verified_at"])
        done = await asyncio.to_thread(lmsp_cli, data_dir, "models", "pull", DEMO_REPO)
        assert done.returncode == 0, done.stderr
        again = await pulled(url, first["verified_at"])
        assert again["id"] == first["id"]
        assert again["state"] != "changed", again
        assert again["digest"] == first["digest"] and again["digest_matches"] is True
        await runs(url, again["id"])
    finally:
        assert await asyncio.to_thread(serve.terminate) == 0

    await asyncio.to_thread(shutil.rmtree, folder)
    await next_second(again["verified_at"])
    done = await asyncio.to_thread(lmsp_cli, data_dir, "models", "pull", DEMO_REPO)  # no service
    assert done.returncode == 0, done.stderr
    serve = ServeProcess(data_dir)
    url = await asyncio.to_thread(serve.start)
    try:
        restarted = await pulled(url, again["verified_at"])
        assert restarted["state"] != "changed", restarted
        assert restarted["digest_matches"] is True
        await runs(url, restarted["id"])
    finally:
        assert await asyncio.to_thread(serve.terminate) == 0


async def test_models_pull_uses_the_hf_token_of_the_shell_it_runs_in(
    hub: Hub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`HF_TOKEN=… lmsp-desktop models pull` against a service started without one, as
    `hf download` users expect; the token is lent for that pull and written nowhere."""
    data_dir = tmp_path / "data"
    admin = await asyncio.to_thread(create_token, data_dir, "admin")
    serve = ServeProcess(data_dir)
    url = await asyncio.to_thread(serve.start)
    token = hub.server.token
    try:
        refused = await asyncio.to_thread(lmsp_cli, data_dir, "models", "pull", GATED_REPO)
        assert refused.returncode == 1 and "is gated" in refused.stderr, refused.stderr
        monkeypatch.setenv("HF_TOKEN", token)
        done = await asyncio.to_thread(lmsp_cli, data_dir, "models", "pull", GATED_REPO)
        # Downloaded with the token (its test bytes are no GGUF: the pull says it cannot run,
        # naming the model by the id the service lists it by).
        assert "Downloaded " in done.stderr, done.stdout + done.stderr
        assert "lmsp-test/gated-gguf:q4_0: invalid: " in done.stderr

        async def listed() -> Any:
            _, models = await api(f"{url}/v1/models", admin)
            return {m["id"] for m in models["data"]} & {"lmsp-test/gated-gguf:q4_0"}

        await until(listed, 30, "the pulled model listed by the id the command named")
        _, tasks = await api(f"{url}/v1/tasks", admin)
        assert token not in str(tasks)
    finally:
        await asyncio.to_thread(serve.terminate)
    for path in data_dir.rglob("*"):  # the database, its WAL, the log: nowhere
        if path.is_file():
            assert token.encode() not in path.read_bytes(), path
    log = (data_dir / "logs" / "lmsp-desktop.log").read_text()
    assert f"({GATED_REPO}:Q4_0) failed: repo_gated:" in log  # the first pull's end


async def test_models_pull_says_a_cancel_and_a_token_without_the_admin_scope(
    hub: Hub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data_dir = tmp_path / "data"
    admin = await asyncio.to_thread(create_token, data_dir, "admin")
    user = await asyncio.to_thread(create_token, data_dir, "models:read", "laptop")
    serve = ServeProcess(data_dir)
    url = await asyncio.to_thread(serve.start)
    hub.server.bytes_per_s = 256 * 1024  # ~12 s: still going when cancelled
    try:
        pulling = asyncio.ensure_future(
            asyncio.to_thread(lmsp_cli, data_dir, "models", "pull", f"{TINY_REPO}:Q8_0")
        )

        async def running() -> Any:
            _, tasks = await api(f"{url}/v1/tasks", admin)
            return next((t for t in tasks["data"] if t["state"] == "running"), None)

        task = await until(running, 30, "the download running")
        status, _ = await api(f"{url}/v1/tasks/{task['id']}/cancel", admin, "POST")
        assert status == 200
        cancelled = await pulling
        assert cancelled.returncode == 1
        assert f"The download of {TINY_REPO}:Q8_0 was cancelled" in cancelled.stderr
        assert "Pull again" in cancelled.stderr

        monkeypatch.setenv("LMSP_TOKEN", user)  # a client's token without `admin`
        scoped = await asyncio.to_thread(lmsp_cli, data_dir, "models", "pull", TINY_REPO)
        assert scoped.returncode == 2
        assert "lacks the scope `admin`" in scoped.stderr
        assert "lmsp-desktop token create" in scoped.stderr and "LMSP_TOKEN" in scoped.stderr
        assert "Clients page" not in scoped.stderr  # a headless server has no window
    finally:
        await asyncio.to_thread(serve.terminate)
    log = (data_dir / "logs" / "lmsp-desktop.log").read_text()
    assert f"download {task['id']} ({TINY_REPO}:Q8_0) cancelled by client tests (" in log


async def test_models_pull_says_the_download_is_kept_when_the_service_dies(
    hub: Hub, tmp_path: Path
) -> None:
    """walkA20: the service killed under a following `models pull` said only "does not
    answer … try again in a moment", as if the fetched bytes were lost."""
    data_dir = tmp_path / "data"
    admin = await asyncio.to_thread(create_token, data_dir, "admin")
    serve = ServeProcess(data_dir)
    url = await asyncio.to_thread(serve.start)
    hub.server.bytes_per_s = 4 * 1024 * 1024
    args = ["--data-dir", str(data_dir), "models", "pull", DEMO_REPO]
    cli = await asyncio.to_thread(
        subprocess.Popen,
        [sys.executable, "-m", "lmsp_desktop", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:

        async def fetching() -> bool:
            _, tasks = await api(f"{url}/v1/tasks", admin)
            return any(t["kind"] == "download" for t in tasks["data"])

        await until(fetching, 60, "the pull's task")
        await asyncio.to_thread(serve.kill)
        out, err = await asyncio.to_thread(cli.communicate, timeout=60)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.communicate()
        if serve.proc and serve.proc.poll() is None:
            await asyncio.to_thread(serve.kill)
    assert cli.returncode == 1, out + err
    assert "stopped answering during the download" in err, err
    assert "the download goes on when the service or the window starts again" in err, err
    assert "Traceback" not in err
