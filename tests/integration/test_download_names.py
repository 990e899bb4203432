"""A download task is named `repo:QUANT` however the file was asked for: the Download
dialog's row (its file name), `models pull REPO:QUANT` in any case, a repo of one model;
`repo:file` only when the quant would not name that one file. Real store, fake hub."""

from __future__ import annotations

import json

from lmsp_desktop.core.downloads.hub import HubFile, gguf_choices, pick
from lmsp_desktop.core.downloads.pull import download_name, pull
from lmsp_desktop.core.storage.store import Store
from tests.support.hub_repos import DEMO_REPO, TINY_REPO, Hub

pytest_plugins = ["tests.integration.download_fixtures"]


async def test_the_same_file_gets_the_same_name_whichever_way_it_was_pulled(
    hub: Hub, store: Store
) -> None:
    names = set()
    # The Download dialog pulls its row's file name; the CLI passes what the user typed.
    for selector in ("tiny-Q8_0.gguf", "tiny-Q8_0", "Q8_0", "q8_0"):
        task = await pull(store.tasks, TINY_REPO, selector)
        names.add(task["model"])
    assert names == {f"{TINY_REPO}:Q8_0"}
    split = await pull(store.tasks, TINY_REPO, "split/tiny-Q2_K-00001-of-00002.gguf")
    assert split["model"] == f"{TINY_REPO}:Q2_K"
    only = await pull(store.tasks, DEMO_REPO)  # a repo of one model, no selector
    assert only["model"] == f"{DEMO_REPO}:Q4_1"
    # Each name pulls its file again.
    again = await pull(store.tasks, *split["model"].split(":"))
    assert await files_of(store, again["id"]) == await files_of(store, split["id"])


async def files_of(store: Store, task_id: str) -> list[str]:
    return [f["name"] for f in json.loads((await store.tasks.get(task_id))["request"])["files"]]


def test_a_quant_two_files_share_leaves_the_file_name() -> None:
    files = [HubFile("a-Q4_K_M.gguf", 1, None), HubFile("b-Q4_K_M.gguf", 1, None)]
    choice = pick("o/r", files, "b-Q4_K_M.gguf")
    assert download_name("o/r", gguf_choices(files), choice) == "o/r:b-Q4_K_M.gguf"
