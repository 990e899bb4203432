"""Models found where other apps keep them (issue 23 items 1, 2, 4): fresh HOMEs laid out as
LM Studio, Ollama and huggingface_hub lay out their stores, holding the real demo model, read
by the real registry into a real SQLite store."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.models.registry import ModelRegistry
from lmsp_desktop.core.models.sources import SOURCES
from lmsp_desktop.core.storage.store import Store
from tests.support import model_stores as stores
from tests.support.polling import until
from tests.support.split_model import copy_split_cut_model

HF_ID = "huggingfacetb/smollm2-135m-instruct-gguf:q4_1"
LMS_ID = "lmstudio-community/smollm2-135m-instruct-gguf:q4_1"
OLLAMA_ID = "smollm2:135m"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh HOME; the stores' variables unset so their defaults under it apply."""
    return stores.fresh_home(tmp_path, monkeypatch)


def registry(store: Store, sources: tuple[str, ...] = SOURCES) -> ModelRegistry:
    return ModelRegistry(store.db, [], include_demo=False, sources=sources)


def tree(root: Path) -> dict[str, tuple[int, int, str]]:
    """Every entry under `root` with its size, mtime and link target: what read-only keeps."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            st = path.lstat()
            link = os.readlink(path) if path.is_symlink() else ""
            out[str(path)] = (st.st_size, st.st_mtime_ns, link)
    return out


@pytest.fixture
def three_stores(home: Path) -> Iterator[Path]:
    stores.add_ollama_model(home, "smollm2", "135m")
    stores.add_hf_file(home, "SmolLM2-135M-Instruct.Q4_1.gguf")
    stores.add_lmstudio_file(
        home, "lmstudio-community", "SmolLM2-135M-Instruct-GGUF", "SmolLM2-135M-Instruct-Q4_1.gguf"
    )
    yield home


async def test_each_store_is_listed_where_it_is_by_the_name_users_know(
    store: Store, three_stores: Path
) -> None:
    home = three_stores
    before = tree(home)
    reg = registry(store)
    await reg.scan()
    models = {m.id: m for m in await reg.list_models()}
    assert set(models) == {OLLAMA_ID, HF_ID, LMS_ID}, reg.problems
    assert reg.problems == []
    demo_digest = "sha256:" + stores.sha256_hex(stores.demo())
    expected = {OLLAMA_ID: "ollama", HF_ID: "huggingface", LMS_ID: "lmstudio"}
    for model_id, source in expected.items():
        info = models[model_id]
        assert info.state == "verified", (model_id, info.meta)
        assert info.digest == demo_digest
        item = info.as_api()
        assert item["source"] == source
        assert item["architecture"] == "llama" and item["quantization"] == "Q4_1"
    # Ollama and Hugging Face name their blobs by sha256: the digest they published matches.
    for model_id in (OLLAMA_ID, HF_ID):
        item = models[model_id].as_api()
        assert item["published_digest"] == demo_digest
        assert item["digest_matches"] is True
    assert "published_digest" not in models[LMS_ID].as_api()  # LM Studio publishes none
    # Found where they are, never copied: the Ollama blob itself, the HF snapshot's link.
    assert models[OLLAMA_ID].path.parent == home / ".ollama" / "models" / "blobs"
    assert models[HF_ID].path.is_symlink() and "snapshots" in models[HF_ID].path.parts
    assert await reg.path_for_run(HF_ID) == models[HF_ID].path
    assert tree(home) == before  # read-only: nothing moved, renamed, deleted or touched
    # A client may spell the name as the store does.
    assert (await reg.get("SmolLM2:135M")).id == OLLAMA_ID


async def test_a_rescan_of_unchanged_stores_reads_nothing(store: Store, three_stores: Path) -> None:
    await registry(store).scan()
    again = registry(store)  # a restart: same database, same stores
    await again.scan()
    assert again.bytes_hashed == 0
    assert {m.state for m in await again.list_models()} == {"verified"}


async def test_a_blob_that_differs_from_its_published_digest_is_never_offered(
    store: Store, home: Path
) -> None:
    wrong = "ab" * 32  # the name says one sha256, the content hashes to another
    stores.add_ollama_model(home, "smollm2", "bad", blob_hex=wrong)
    stores.add_hf_file(home, "SmolLM2-135M-Instruct.Q4_1.gguf", blob_hex=wrong)
    reg = registry(store)
    await reg.scan()
    models = {m.id: m for m in await reg.list_models()}
    assert set(models) == {"smollm2:bad", HF_ID}
    for model_id, publisher in (("smollm2:bad", "Ollama"), (HF_ID, "Hugging Face")):
        info = models[model_id]
        item = info.as_api()
        assert item["state"] == "invalid"
        assert item["digest_matches"] is False
        assert item["published_digest"] == f"sha256:{wrong}"
        assert f"differs from the digest {publisher} published" in item["reason"]
        with pytest.raises(LmspError) as refused:
            await reg.path_for_run(model_id)
        assert (refused.value.status, refused.value.code) == (400, "model_invalid")
    # Verifying again does not make it runnable: the content still is not what was published.
    again = await reg.verify(HF_ID)
    assert again.state == "invalid"


async def test_bad_input_in_a_store_is_named_and_the_rest_is_listed(
    store: Store, home: Path
) -> None:
    stores.add_ollama_model(home, "smollm2", "135m")
    stores.add_ollama_model(home, "ghost", "7b", blob_hex="cd" * 32, write_blob=False)
    manifests = home / ".ollama" / "models" / "manifests" / "registry.ollama.ai"
    loop = manifests / "looping"
    loop.symlink_to(loop)  # a folder no one can read (as root, a mode of 000 would not stop us)
    good = stores.add_hf_file(home, "SmolLM2-135M-Instruct.Q4_1.gguf")
    broken = good.parent / "SmolLM2-135M-Instruct.Q8_0.gguf"
    broken.symlink_to("../../blobs/" + "ef" * 32)  # its blob is gone
    (good.parent / "mmproj-SmolLM2-f16.gguf").symlink_to(os.readlink(good))  # not a model
    lms = home / ".lmstudio" / "models" / "someone" / "Unreadable-GGUF"
    lms.parent.mkdir(parents=True)
    lms.symlink_to(lms)
    reg = registry(store)
    await reg.scan()
    ids = {m.id for m in await reg.list_models()}
    assert ids == {OLLAMA_ID, HF_ID}  # the rest of the list is unaffected
    messages = {p.message for p in reg.problems}
    assert any("ghost:7b" in m and "ollama pull ghost:7b" in m for m in messages), messages
    assert any(str(loop) in m and "cannot read the folder" in m for m in messages), messages
    assert any(str(broken) in m and "broken link" in m for m in messages), messages
    assert any("Unreadable-GGUF" in m for m in messages), messages
    assert len(reg.problems) == 4, messages


async def test_a_split_model_is_one_model_named_by_its_first_part(
    store: Store, home: Path, tmp_path: Path
) -> None:
    parts = copy_split_cut_model(tmp_path / "SmolLM2-135M-Instruct-Q4_1.gguf")
    for part in parts:
        stores.place(part, home / ".lmstudio" / "models" / "me" / "Split-GGUF" / part.name)
    for part in parts[:2]:  # its last part never arrived: it cannot load, so it is not listed
        stores.place(part, home / ".lmstudio" / "models" / "me" / "Cut-GGUF" / part.name)
    reg = registry(store)
    await reg.scan()
    [model] = await reg.list_models()
    assert model.id == "me/split-gguf:q4_1"
    assert model.path.name == parts[0].name
    assert model.state == "verified"
    [problem] = reg.problems
    assert "Cut-GGUF" in problem.path and parts[2].name in problem.message


async def test_a_source_switched_off_is_not_listed_and_comes_back_verified(
    store: Store, three_stores: Path
) -> None:
    await registry(store).scan()
    off = registry(store, sources=("lmstudio", "huggingface"))
    await off.scan()
    assert {m.id for m in await off.list_models()} == {HF_ID, LMS_ID}
    with pytest.raises(LmspError) as hidden:
        await off.get(OLLAMA_ID)
    assert hidden.value.code == "model_not_found"
    back = registry(store)
    await back.scan()
    assert (await back.get(OLLAMA_ID)).state == "verified"
    assert back.bytes_hashed == 0  # its digest was kept while it was switched off


async def test_a_name_updated_to_a_new_file_keeps_its_id(
    store: Store, home: Path, tmp_path: Path
) -> None:
    """`ollama pull` moves a tag to a new blob and prunes the old one; a new revision of a
    Hugging Face repo is a new snapshot: the name users know keeps leading to the model."""
    old = stores.add_ollama_model(home, "smollm2", "135m")
    stores.add_hf_file(home, "SmolLM2-135M-Instruct.Q4_1.gguf")
    reg = registry(store)
    await reg.scan()
    assert {m.id for m in await reg.list_models()} == {OLLAMA_ID, HF_ID}
    newer = tmp_path / "newer.gguf"
    with stores.demo().open("rb") as src, newer.open("wb") as dst:
        dst.write(src.read())
        dst.write(b"\0" * 32)  # other bytes, so another sha256 (padding after the tensors)
    old.unlink()
    blob = stores.add_ollama_model(home, "smollm2", "135m", newer)
    repo = (
        home
        / ".cache"
        / "huggingface"
        / "hub"
        / "models--HuggingFaceTB--SmolLM2-135M-Instruct-GGUF"
    )
    for link in (repo / "snapshots").rglob("*.gguf"):
        link.unlink()
    link = stores.add_hf_file(home, "SmolLM2-135M-Instruct.Q4_1.gguf", newer, commit="f" * 40)
    await reg.scan()
    models = {m.id: m for m in await reg.list_models()}
    assert set(models) == {OLLAMA_ID, HF_ID}  # no "-2", nothing left missing
    assert models[OLLAMA_ID].path == blob and models[HF_ID].path == link
    new_digest = "sha256:" + stores.sha256_hex(newer)
    for info in models.values():
        assert (info.state, info.digest, info.digest_matches) == ("verified", new_digest, True)


async def test_the_stores_variables_and_older_folders_are_honoured(
    store: Store, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = tmp_path / "elsewhere"
    stores.add_ollama_model(elsewhere, "smollm2", "135m")  # under elsewhere/.ollama/models
    monkeypatch.setenv("OLLAMA_MODELS", str(elsewhere / ".ollama" / "models"))
    stores.add_hf_file(elsewhere, "SmolLM2-135M-Instruct.Q4_1.gguf")
    monkeypatch.setenv("HF_HOME", str(elsewhere / ".cache" / "huggingface"))
    stores.place(stores.demo(), home / ".cache/lm-studio/models/old/Older-GGUF/older-Q4_1.gguf")
    reg = registry(store)
    await reg.scan()
    assert {m.id for m in await reg.list_models()} == {OLLAMA_ID, HF_ID, "old/older-gguf:q4_1"}


async def test_ollama_names_are_the_ones_ollama_list_shows(store: Store, home: Path) -> None:
    def variant(n: int) -> Path:  # the demo with n bytes after its tensors: another blob
        path = home.parent / f"variant{n}.gguf"
        shutil.copyfile(stores.demo(), path)  # a copy: place() may hard-link the demo itself
        with path.open("ab") as f:
            f.write(b"\0" * n)
        return path

    stores.add_ollama_model(home, "qwen2.5", "latest")
    stores.add_ollama_model(home, "qwen2.5", "7b")  # the same blob, tagged twice: one model
    stores.add_ollama_model(home, "tiny", "1b", variant(32), registry="ollama.com")
    stores.add_ollama_model(home, "mine", "latest", variant(64), namespace="someone")
    stores.add_ollama_model(
        home, "Repo-GGUF", "Q4_K_M", variant(96), namespace="org", registry="hf.co"
    )
    reg = registry(store)
    await reg.scan()
    ids = {m.id for m in await reg.list_models()}
    assert ids == {"qwen2.5:7b", "tiny:1b", "someone/mine:latest", "hf.co/org/repo-gguf:q4_k_m"}


def padded(tmp_path: Path, n: int) -> Path:
    """The demo with `n` bytes after its tensors: the same model, another file (sha256)."""
    path = tmp_path / f"padded{n}.gguf"
    shutil.copyfile(stores.demo(), path)  # a copy: place() may hard-link the demo itself
    with path.open("ab") as f:
        f.write(b"\0" * n)
    return path


async def test_a_new_revision_moves_the_name_and_the_old_snapshot_is_no_twin(
    store: Store, home: Path, tmp_path: Path
) -> None:
    """`hf download` of a repo that moved on: refs/main names a new snapshot, the old one stays
    in the cache (as huggingface_hub leaves it). The name runs the new revision's file; the
    old file is not listed beside it as `…-2`, and deleting the old snapshot
    (`hf cache delete`) loses nothing. A quant only the old revision has is still listed."""
    filename = "SmolLM2-135M-Instruct.Q4_1.gguf"
    stores.add_hf_file(home, filename)
    only_old = stores.add_hf_file(home, "SmolLM2-135M-Instruct.Q8_0.gguf", padded(tmp_path, 64))
    reg = registry(store)
    await reg.scan()
    q8 = "huggingfacetb/smollm2-135m-instruct-gguf:q8_0"
    assert {m.id for m in await reg.list_models()} == {HF_ID, q8}
    newer = padded(tmp_path, 32)
    link = stores.add_hf_file(home, filename, newer, commit="f" * 40)  # refs/main → ffff…
    await reg.scan()
    models = {m.id: m for m in await reg.list_models()}
    assert set(models) == {HF_ID, q8}  # no `:q4_1-2` for the old revision's file
    assert models[HF_ID].path == link and models[q8].path == only_old
    new_digest = "sha256:" + stores.sha256_hex(newer)
    assert (models[HF_ID].state, models[HF_ID].digest) == ("verified", new_digest)
    assert await reg.path_for_run(HF_ID) == link
    shutil.rmtree(only_old.parent.parent / stores.HF_COMMIT)  # the old snapshot deleted
    await reg.scan()
    models = {m.id: m for m in await reg.list_models()}
    assert models[HF_ID].state == "verified" and models[HF_ID].path == link
    assert models[q8].state == "missing"  # it was only in the old snapshot


async def test_an_ollama_blob_tagged_twice_answers_to_each_tag_and_each_tag_follows_its_pull(
    store: Store, home: Path, tmp_path: Path
) -> None:
    """`ollama pull smollm2` then `ollama pull smollm2:135m`: one blob, two tags, one model
    (hashed once) found by either. Re-pulling `smollm2:135m` to a new blob moves that name
    only: `smollm2:latest` keeps the old blob, as `ollama run` would run each. Pulling
    `smollm2` again joins them, the old blob pruned: one model again, nothing missing."""
    old = stores.add_ollama_model(home, "smollm2", "latest")
    stores.add_ollama_model(home, "smollm2", "135m")
    reg = registry(store, ("ollama",))
    await reg.scan()
    [model] = await reg.list_models()
    assert (model.id, model.aliases, model.state) == (OLLAMA_ID, ["smollm2:latest"], "verified")
    assert reg.bytes_hashed == old.stat().st_size  # one file, read once
    assert (await reg.get("smollm2:latest")).id == OLLAMA_ID
    assert (await reg.get("SmolLM2:Latest")).id == OLLAMA_ID
    assert await reg.path_for_run("smollm2:latest") == old

    newer = padded(tmp_path, 32)
    blob = stores.add_ollama_model(home, "smollm2", "135m", newer)  # `latest` stays on `old`
    await reg.scan()
    models = {m.id: m for m in await reg.list_models()}
    assert set(models) == {OLLAMA_ID, "smollm2:latest"}  # no `smollm2:135m-2`
    assert models[OLLAMA_ID].path == blob and models["smollm2:latest"].path == old
    assert models[OLLAMA_ID].digest == "sha256:" + stores.sha256_hex(newer)
    assert models["smollm2:latest"].digest == "sha256:" + stores.sha256_hex(old)
    assert {m.state for m in models.values()} == {"verified"}
    assert [m.aliases for m in models.values()] == [[], []]
    assert await reg.path_for_run(OLLAMA_ID) == blob
    assert await reg.path_for_run("smollm2:latest") == old

    stores.add_ollama_model(home, "smollm2", "latest", newer)  # `ollama pull smollm2`
    old.unlink()  # pruned
    await reg.scan()
    [model] = await reg.list_models()
    assert (model.id, model.aliases, model.path) == (OLLAMA_ID, ["smollm2:latest"], blob)
    assert (await reg.get("smollm2:latest")).id == OLLAMA_ID
    assert await reg.path_for_run("smollm2:latest") == blob


async def test_a_name_without_a_tag_is_its_latest_tag_on_every_api(
    store: Store, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ollama reads `smollm2` as `smollm2:latest`, and so does the registry, for every API
    (an OpenAI client sends the bare name Open WebUI showed): the blob tagged `latest` beside
    `135m` is found by `smollm2`, the second time from memory (B1). A name whose model is
    here only under other tags answers a 404 naming them."""
    stores.add_ollama_model(home, "smollm2", "latest")
    stores.add_ollama_model(home, "smollm2", "135m")
    stores.add_ollama_model(home, "qwen2.5", "7b", padded(tmp_path, 32))
    stores.add_ollama_model(home, "qwen2.5", "14b", padded(tmp_path, 64))
    reg = registry(store, ("ollama",))
    await reg.scan()
    assert (await reg.get("smollm2")).id == OLLAMA_ID
    assert await reg.path_for_run("SmolLM2") == (await reg.get(OLLAMA_ID)).path
    reads = 0
    fetchone = store.db.fetchone

    async def counted(sql: str, params: Any = ()) -> Any:
        nonlocal reads
        reads += 1
        return await fetchone(sql, params)

    monkeypatch.setattr(store.db, "fetchone", counted)
    assert (await reg.get("smollm2")).id == OLLAMA_ID
    assert reads == 0
    for name in ("qwen2.5", "qwen2.5:latest", "qwen2.5:3b"):
        with pytest.raises(LmspError) as missing:
            await reg.get(name)
        assert missing.value.code == "model_not_found"
        assert "This service has qwen2.5:14b, qwen2.5:7b: ask for one of them by its name" in (
            missing.value.message
        ), missing.value.message
        assert ("means qwen2.5:latest" in missing.value.message) == (name == "qwen2.5")
    with pytest.raises(LmspError) as missing:
        await reg.get("tiny:1b")
    assert "This service has" not in missing.value.message, missing.value.message


async def test_a_file_changed_under_a_tag_is_marked_changed_whichever_name_ran_it(
    store: Store, home: Path, tmp_path: Path
) -> None:
    """A run by another tag of the blob (`smollm2:latest`) or by the bare name finds the file
    changed since it was verified: the model itself is marked changed (the Models page and
    every later create see it), not a row named as the request was, which none is."""
    for name in ("smollm2:latest", "smollm2"):
        blob = padded(tmp_path, 16 + len(name))
        stores.add_ollama_model(home, "smollm2", "135m", blob)
        stored = stores.add_ollama_model(home, "smollm2", "latest", blob)
        reg = registry(store, ("ollama",))
        await reg.scan()
        assert await reg.path_for_run(name) == stored
        with stored.open("ab") as f:  # a copy of the demo (padded), never the demo itself
            f.write(b"\0")
        with pytest.raises(LmspError) as refused:
            await reg.path_for_run(name)
        assert refused.value.code == "model_changed", refused.value.code
        assert (await reg.get(OLLAMA_ID)).state == "changed"
        await reg.verify(OLLAMA_ID, accept_new=True)  # the next round starts from verified


async def test_an_unknown_name_looks_in_the_stores_again_at_most_once_a_while(
    store: Store, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lookup of a name no model has rescans the stores when the last scan is older than
    `rescan_after_s`, one scan for every lookup asking meanwhile; a known model's lookup and
    a registry that does not follow the stores (a command's) never scan."""
    stores.add_ollama_model(home, "smollm2", "135m")
    reg = registry(store, ("ollama",))
    scans = 0
    discover = reg._discover_and_record

    async def counted() -> list[object]:
        nonlocal scans
        scans += 1
        return await discover()  # type: ignore[return-value]

    monkeypatch.setattr(reg, "_discover_and_record", counted)
    asking = 0
    rescan_if_stale = reg.rescan_if_stale

    async def asked(asked_at: float | None = None) -> bool:
        nonlocal asking
        asking += 1
        return await rescan_if_stale(asked_at)

    monkeypatch.setattr(reg, "rescan_if_stale", asked)
    await reg.scan()  # as a command does: it does not follow the stores
    reg.rescan_after_s = 0
    stores.add_ollama_model(home, "tiny", "1b", padded(home.parent, 32))
    with pytest.raises(LmspError):
        await reg.get("tiny:1b")
    assert scans == 1
    reg.start_scan()  # the service's: follows the stores from now on (scanned already)
    reg.rescan_after_s = 3600  # the last scan is recent
    with pytest.raises(LmspError):
        await reg.get("tiny:1b")
    await reg.get(OLLAMA_ID)
    assert scans == 1
    reg.rescan_after_s = 0
    asking = 0
    await reg.get(OLLAMA_ID)  # known: not even asked, however old the last scan
    assert scans == 1 and asking == 0
    waiting = 0
    wait_recorded = reg.gate.wait_recorded

    async def waits() -> None:
        nonlocal waiting
        waiting += 1
        await wait_recorded()

    monkeypatch.setattr(reg.gate, "wait_recorded", waits)
    async with reg._scan_lock:  # the rescan cannot finish meanwhile
        first = asyncio.create_task(reg.get("tiny:1b"))
        await until(lambda: asking == 1 and reg.gate.recording, 10, "the first to rescan")
        # A lookup that begins while that rescan records waits for it and, still unknown
        # then, does not scan again: the rescan looked after it began (it made a third scan,
        # and the order of the two lookups decided which happened: a flaky test).
        second = asyncio.create_task(reg.get("nothing:1b"))
        await until(lambda: waiting == 1, 10, "the second lookup to wait for the rescan")
        # Callers asking at once share one rescan.
        sharing = [asyncio.create_task(reg.rescan_if_stale()) for _ in range(2)]
        await until(lambda: asking == 3, 10, "both callers to ask")
    with pytest.raises(LmspError) as nothing:
        await second
    assert (await first).id == "tiny:1b"
    assert await asyncio.gather(*sharing) == [True, True]
    assert scans == 2
    assert "`lmsp-desktop models rescan`" in nothing.value.message
    assert await reg.path_for_run("tiny:1b")  # hashed in the background meanwhile


async def test_a_twin_left_by_an_earlier_version_gives_its_file_back_to_the_name(
    store: Store, home: Path, tmp_path: Path
) -> None:
    """An earlier version named a new revision's file `…:q4_1-2` and kept the name on the old
    snapshot's. The next scan gives the name the new file; the twin, which held that file's
    path (unique in the table), is forgotten, not left `missing`."""
    filename = "SmolLM2-135M-Instruct.Q4_1.gguf"
    stores.add_hf_file(home, filename)
    reg = registry(store)
    await reg.scan()
    newer = padded(tmp_path, 32)
    link = stores.add_hf_file(home, filename, newer, commit="f" * 40)
    st = link.stat()

    def twin(conn: Any) -> None:  # as the earlier version recorded the new revision's file
        conn.execute(
            "INSERT INTO models (id, path, size_bytes, mtime_ns, state, meta, created_at)"
            " VALUES (?, ?, ?, ?, 'unverified', ?, 0)",
            (f"{HF_ID}-2", str(link), st.st_size, st.st_mtime_ns, '{"source": "huggingface"}'),
        )

    await store.db.run(twin)
    await reg.scan()
    [model] = await reg.list_models()
    assert (model.id, model.path, model.state) == (HF_ID, link, "verified")
    assert model.digest == "sha256:" + stores.sha256_hex(newer)


async def test_two_tags_that_swap_blobs_each_follow_their_tag(
    store: Store, home: Path, tmp_path: Path
) -> None:
    """Each name follows its tag to the other's blob (paths are unique in the table: neither
    row may take its new path before the other has left it)."""
    one, two = padded(tmp_path, 32), padded(tmp_path, 64)
    blob_one = stores.add_ollama_model(home, "pair", "one", one)
    blob_two = stores.add_ollama_model(home, "pair", "two", two)
    reg = registry(store, ("ollama",))
    await reg.scan()
    stores.add_ollama_model(home, "pair", "one", two)
    stores.add_ollama_model(home, "pair", "two", one)
    await reg.scan()
    models = {m.id: m for m in await reg.list_models()}
    assert (models["pair:one"].path, models["pair:two"].path) == (blob_two, blob_one)
    assert models["pair:one"].digest == "sha256:" + stores.sha256_hex(two)
    assert {m.state for m in models.values()} == {"verified"}
