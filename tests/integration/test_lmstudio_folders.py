"""LM Studio's models where the user put them: the Models Directory chosen in LM Studio
(`downloadsFolder` in its settings.json) and a home moved with `~/.lmstudio-home-pointer`,
read by the real registry into a real SQLite store, with the demo model as the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from lmsp_desktop.core.models.registry import ModelRegistry
from lmsp_desktop.core.models.sources import LMSTUDIO
from lmsp_desktop.core.storage.store import Store
from tests.support import model_stores as stores

LMS_ID = "lmstudio-community/smollm2-135m-instruct-gguf:q4_1"
OLD_ID = "me/old-gguf:q4_1"
FILE = "SmolLM2-135M-Instruct-Q4_1.gguf"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return stores.fresh_home(tmp_path, monkeypatch)


async def listed(store: Store) -> tuple[dict[str, str], list[str]]:
    """{model id: its file} of an LM Studio-only scan, and the problems it said."""
    registry = ModelRegistry(store.db, [], include_demo=False, sources=(LMSTUDIO,))
    await registry.scan()
    models = {m.id: str(m.path) for m in await registry.list_models()}
    return models, [p.message for p in registry.problems]


async def test_the_models_directory_chosen_in_lm_studio_is_read(
    store: Store, home: Path, tmp_path: Path
) -> None:
    """Models moved to another disk and that folder chosen in LM Studio: listed from there,
    and what is still in the default folder too."""
    elsewhere = tmp_path / "bigdisk" / "models"
    moved = stores.add_lmstudio_file(
        home, "lmstudio-community", "SmolLM2-135M-Instruct-GGUF", FILE, models=elsewhere
    )
    left = stores.add_lmstudio_file(home, "me", "Old-GGUF", "old-Q4_1.gguf")
    stores.set_lmstudio_models_folder(home / ".lmstudio", elsewhere)
    models, problems = await listed(store)
    assert models == {LMS_ID: str(moved), OLD_ID: str(left)}, problems
    assert problems == []


async def test_a_home_moved_with_the_pointer_file_is_read_with_its_settings(
    store: Store, home: Path, tmp_path: Path
) -> None:
    lms_home = tmp_path / "data" / "lmstudio"
    stores.move_lmstudio_home(home, lms_home)
    in_home = stores.add_lmstudio_file(
        home, "lmstudio-community", "SmolLM2-135M-Instruct-GGUF", FILE, models=lms_home / "models"
    )
    models, problems = await listed(store)
    assert models == {LMS_ID: str(in_home)}, problems
    # The Models Directory set in that home's settings.json (not ~/.lmstudio's) counts.
    chosen = tmp_path / "nvme" / "llms"
    moved = stores.add_lmstudio_file(home, "me", "Old-GGUF", "old-Q4_1.gguf", models=chosen)
    stores.set_lmstudio_models_folder(lms_home, chosen)
    stores.set_lmstudio_models_folder(home / ".lmstudio", tmp_path / "not-this-one")
    models, problems = await listed(store)
    assert models == {LMS_ID: str(in_home), OLD_ID: str(moved)}, problems
    assert problems == []


async def test_a_models_directory_on_a_disk_not_mounted_is_said(
    store: Store, home: Path, tmp_path: Path
) -> None:
    stores.add_lmstudio_file(home, "lmstudio-community", "SmolLM2-135M-Instruct-GGUF", FILE)
    unplugged = tmp_path / "media" / "usb" / "models"
    stores.set_lmstudio_models_folder(home / ".lmstudio", unplugged)
    models, problems = await listed(store)
    assert set(models) == {LMS_ID}  # the default folder is still read
    assert len(problems) == 1 and str(unplugged) in problems[0]
    assert "Models Directory" in problems[0] and "Mount the disk" in problems[0]
    # A pointer naming a home that is gone: said too, and ~/.lmstudio read instead.
    (home / ".lmstudio-home-pointer").write_text(str(tmp_path / "gone"))
    (home / ".lmstudio" / "settings.json").unlink()
    models, problems = await listed(store)
    assert set(models) == {LMS_ID}
    assert len(problems) == 1 and ".lmstudio-home-pointer" in problems[0], problems


async def test_a_settings_file_that_is_not_json_is_said_and_the_defaults_are_read(
    store: Store, home: Path
) -> None:
    stores.add_lmstudio_file(home, "lmstudio-community", "SmolLM2-135M-Instruct-GGUF", FILE)
    (home / ".lmstudio" / "settings.json").write_text('{"downloadsFolder": ')  # cut short
    models, problems = await listed(store)
    assert set(models) == {LMS_ID}
    assert len(problems) == 1 and "not valid JSON" in problems[0], problems


async def test_a_models_directory_that_is_the_default_folder_by_a_link_lists_each_model_once(
    store: Store, home: Path, tmp_path: Path
) -> None:
    """LM Studio writes its Models Directory even when it is the default; a user may also
    reach the default folder through a link. Each file is one model, not two."""
    path = stores.add_lmstudio_file(home, "lmstudio-community", "SmolLM2-135M-Instruct-GGUF", FILE)
    link = tmp_path / "models-link"
    link.symlink_to(home / ".lmstudio" / "models")
    stores.set_lmstudio_models_folder(home / ".lmstudio", link)
    models, problems = await listed(store)
    assert list(models) == [LMS_ID], models
    assert problems == []
    stores.set_lmstudio_models_folder(home / ".lmstudio", home / ".lmstudio" / "models/")
    models, problems = await listed(store)
    assert models == {LMS_ID: str(path)}, models
