"""How a download ends, as the log and its caller see it: one log line for each end (failed
with its code and message, cancelled with who asked, completed), a hub token lent by the
caller of one pull used for that download only and written nowhere, and a revision the hub
does not have named. Real fake-hub server on loopback, real store, real huggingface_hub."""

from __future__ import annotations

import logging

import pytest

from lmsp_desktop.core.downloads.manager import DownloadManager
from lmsp_desktop.core.downloads.pull import pull
from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.ids import new_id
from lmsp_desktop.core.storage.store import Store
from tests.support.hub_repos import GATED_REPO, TINY_REPO, Hub, error_of, finished
from tests.support.polling import until

pytest_plugins = ["tests.integration.download_fixtures"]


def lines(caplog: pytest.LogCaptureFixture, task_id: str) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if task_id in r.getMessage()]


async def logged(caplog: pytest.LogCaptureFixture, task_id: str) -> list[tuple[int, str]]:
    """The task's log lines once there is one: the manager writes its end's line after the
    end's commit, which the test may see first."""
    await until(lambda: lines(caplog, task_id), 10, f"a log line of {task_id}")
    return lines(caplog, task_id)


async def test_a_failed_and_a_cancelled_download_each_log_their_end(
    hub: Hub, store: Store, manager: DownloadManager, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="lmsp_desktop.core.downloads")
    hub.server.corrupt = True
    failed = await pull(store.tasks, TINY_REPO, "Q4_K_M")
    assert (await finished(store, failed["id"]))["state"] == "failed"
    [(level, line)] = await logged(caplog, failed["id"])
    assert level == logging.WARNING
    assert f"{TINY_REPO}:Q4_K_M" in line and "failed: digest_mismatch:" in line
    assert "differs from the digest the hub published" in line

    hub.server.corrupt = False
    hub.server.bytes_per_s = 512 * 1024  # still going when cancelled
    task = await pull(store.tasks, TINY_REPO, "Q8_0")

    async def some_bytes() -> bool:
        events = await store.tasks.events(task["id"])
        return any(e.get("bytes_done", 0) > 0 for e in events)

    await until(some_bytes, 30, "the first bytes")
    manager.cancelling(task["id"], "client laptop (client_1)")  # as the cancel route does
    await store.tasks.cancel(task["id"])
    assert (await finished(store, task["id"], 10))["state"] == "cancelled"
    [(level, line)] = await logged(caplog, task["id"])
    assert level == logging.INFO
    assert "cancelled by client laptop (client_1) after" in line and f"{TINY_REPO}:Q8_0" in line

    hub.server.bytes_per_s = None
    done = await pull(store.tasks, TINY_REPO, "Q8_0")
    assert (await finished(store, done["id"]))["state"] == "completed"
    [(level, line)] = await logged(caplog, done["id"])
    assert line.startswith(f"downloaded {done['id']} ({TINY_REPO}:Q8_0): ")


async def test_a_token_lent_for_one_pull_fetches_that_gated_download_only(
    hub: Hub, store: Store, manager: DownloadManager, caplog: pytest.LogCaptureFixture
) -> None:
    """As `POST /v1/models/pull` with X-HF-Token does (what `models pull` sends from its
    HF_TOKEN): this process has no token of its own."""
    caplog.set_level(logging.DEBUG)
    token = hub.server.token
    task_id = new_id("dl")
    manager.lend_token(task_id, token)  # before the commit, as the route does
    task = await pull(store.tasks, GATED_REPO, task_id=task_id, token=token)
    row = await finished(store, task["id"])
    assert row["state"] == "completed", error_of(row)

    # The next pull of it, without a token of its own, is refused: the token was not kept.
    (hub.cache / f"models--{GATED_REPO.replace('/', '--')}").rename(hub.cache / "moved-away")
    again = await pull(store.tasks, GATED_REPO)
    row = await finished(store, again["id"])
    assert row["state"] == "failed" and error_of(row)["code"] == "repo_gated"
    assert token not in caplog.text
    for path in store.db.path.parent.iterdir():  # the database, its WAL, whatever is there
        if path.is_file():
            assert token.encode() not in path.read_bytes(), path
    assert token not in str(await store.tasks.events(task["id"]))


async def test_a_revision_the_hub_lacks_is_named(hub: Hub, store: Store) -> None:
    with pytest.raises(LmspError) as raised:
        await pull(store.tasks, TINY_REPO, "Q8_0", revision="v9.9")
    assert raised.value.code == "revision_not_found"
    assert f"{TINY_REPO} has no revision 'v9.9'" in raised.value.message
    assert await store.tasks.count() == 0
