"""ModelRegistry.known: what `get` answers, from memory, for the create path (B1). It is
either None (ask `get`) or exactly `get`'s answer: a model's state as it is now, after a
rescan found its file changed too, never a stale one."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from lmsp_desktop.core.storage.store import Store
from tests.unit.core.test_models_gguf_meta import write_gguf
from tests.unit.core.test_models_registry import registry, touch_later


async def test_known_is_none_or_what_get_answers(store: Store, tmp_path: Path) -> None:
    folder = tmp_path.resolve() / "models"
    folder.mkdir()
    path = write_gguf(folder / "Tiny.gguf")
    reg = registry(store, folder)
    await reg.scan()
    assert reg.known("nothing-here") is None  # get answers 404 for it
    first = await reg.get("tiny")
    known = reg.known("TINY")  # ids are lowercase, as get takes them
    assert known is not None and known is not first
    assert asdict(known) == asdict(first) and known.state == "verified"
    known.state = "set by a caller"  # its own copy (path_for_run sets it)
    assert (await reg.get("tiny")).state == "verified"
    # A rescan that finds the file changed: known gives the new state, or leaves it to get.
    touch_later(path)
    await reg.scan()
    after = reg.known("tiny")
    assert after is None or after.state == "changed"
    assert (await reg.get("tiny")).state == "changed"
    known_now = reg.known("tiny")
    assert known_now is not None and known_now.state == "changed"
