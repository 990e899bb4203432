"""A hub model is pulled by any of the names a user has for it: `hf.co/owner/name:QUANT` (the
Models table's Location, `ollama pull`'s form), `huggingface.co/owner/name`, and a pasted
https address of the repo or of one of its files (the file is the one pulled). `models pull`
refused them all ("'https' is not a Hugging Face repo id"). And a repo the hub does not show
says where the token goes: the Download dialog's Keep token, or HF_TOKEN (there is no token
field in Settings, which it named). Real store, a real (fake) hub on loopback."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from lmsp_desktop.core.downloads.pull import pull, repo_models, split_reference
from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.storage.store import Store
from tests.support.hub_repos import GATED_REPO, TINY_REPO, Hub, error_of, finished

pytest_plugins = ["tests.integration.download_fixtures"]

Q8 = f"{TINY_REPO}:Q8_0"


@pytest.mark.parametrize(
    ("written", "model"),
    [
        (f"hf.co/{TINY_REPO}:Q8_0", Q8),
        (f"huggingface.co/{TINY_REPO}:q8_0", Q8),
        (f"https://huggingface.co/{TINY_REPO}/blob/main/tiny-Q8_0.gguf", Q8),
        (
            f"https://huggingface.co/{TINY_REPO}/resolve/main/tiny-Q4_K_M.gguf?download=true",
            f"{TINY_REPO}:Q4_K_M",
        ),
        (
            f"https://hf.co/{TINY_REPO}/blob/main/split/tiny-Q2_K-00001-of-00002.gguf",
            f"{TINY_REPO}:Q2_K",
        ),
    ],
)
async def test_a_hub_address_or_hf_co_name_pulls_the_model_it_names(
    hub: Hub, store: Store, written: str, model: str
) -> None:
    task = await pull(store.tasks, written)
    assert task["model"] == model
    assert split_reference(written)[0] == TINY_REPO


async def test_the_repo_page_address_lists_its_models_and_pull_asks_which(
    hub: Hub, store: Store
) -> None:
    page = f"https://huggingface.co/{TINY_REPO}"
    assert len(await repo_models(page)) == 3  # the Download dialog's listing of it
    assert len(await repo_models(f"hf.co/{TINY_REPO}")) == 3
    with pytest.raises(LmspError) as ambiguous:
        await pull(store.tasks, f"{page}/tree/main")
    assert ambiguous.value.code == "file_ambiguous"
    # The API's pull with the file in both its repo address and its quant: they must agree.
    task = await pull(store.tasks, f"{page}/blob/main/tiny-Q8_0.gguf", "Q8_0")
    assert task["model"] == Q8
    with pytest.raises(LmspError) as disagree:
        await pull(store.tasks, f"{page}/blob/main/tiny-Q8_0.gguf", "Q4_K_M")
    assert disagree.value.param == "repo" and "give one of them" in disagree.value.message


async def test_an_address_elsewhere_is_refused_naming_the_forms(hub: Hub, store: Store) -> None:
    for written in (f"https://github.com/{TINY_REPO}", "https://huggingface.co/lmsp-test"):
        with pytest.raises(LmspError) as refused:
            await pull(store.tasks, written)
        assert "not the address of a Hugging Face repo" in refused.value.message
        assert "hf.co/owner/name:Q4_K_M" in refused.value.message
    with pytest.raises(LmspError) as bad:
        await pull(store.tasks, "not a repo")
    assert "hf.co/owner/name" in bad.value.message
    assert await store.tasks.count() == 0


async def test_the_token_advice_names_where_the_token_goes(
    hub: Hub, store: Store, manager: object
) -> None:
    with pytest.raises(LmspError) as missing:
        await pull(store.tasks, "lmsp-test/no-such-repo")
    assert missing.value.code == "repo_not_found"
    for said in (
        missing.value.message,
        error_of(await finished(store, (await pull(store.tasks, GATED_REPO))["id"]))["message"],
    ):
        assert "Settings" not in said, said
        assert "Keep token in the Download dialog, or HF_TOKEN" in said, said


async def test_models_pull_takes_the_hf_co_name(hub: Hub, tmp_path: Path) -> None:
    command = [sys.executable, "-m", "lmsp_desktop", "--data-dir", str(tmp_path / "data")]
    pulled = await asyncio.to_thread(
        subprocess.run,
        [*command, "models", "pull", f"hf.co/{Q8}"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    # Downloaded (the tiny file is no model the service could run: exit 1 after it).
    assert f"Downloading {Q8} (task" in pulled.stdout, pulled.stdout + pulled.stderr
    assert "repo id" not in pulled.stderr
