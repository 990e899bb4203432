"""`lmsp-desktop models verify NAME…|--all` and `models rescan` on a real data directory:
without a service (the command verifies itself, through the registry's own verify) and
beside a running one (through its HTTP route, with a one-off admin client it revokes)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from lmsp_desktop.cli import main
from lmsp_desktop.core.models.registry import ModelRegistry
from lmsp_desktop.core.storage.clients import list_clients
from lmsp_desktop.core.storage.store import Store
from tests.integration.service_fixtures import LiveCore
from tests.integration.test_cli_admin import admin, parse
from tests.support.polling import until_sync
from tests.unit.core.test_models_gguf_meta import write_gguf
from tests.unit.core.test_models_registry import touch_later


@pytest.fixture(autouse=True)
def no_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LMSP_TOKEN", raising=False)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    path = (tmp_path / "models").resolve()
    path.mkdir()
    return path


def scan(data_dir: Path, folder: Path) -> dict[str, str]:
    """What a service's start records (its scan of `folder`), then each model's state."""

    async def run() -> dict[str, str]:
        store = Store(data_dir)
        await store.open()
        try:
            registry = ModelRegistry(store.db, [folder], include_demo=False)
            await registry.scan()
            return {m.id: m.state for m in await registry.list_models()}
        finally:
            await store.close()

    return asyncio.run(run())


def verify(data_dir: Path, folder: Path, *argv: str) -> int:
    """`lmsp-desktop --models-dir FOLDER models verify ...`, the folder given as it was to the
    service (scan): a model of a folder not looked in is not listed."""
    return main(
        ["--data-dir", str(data_dir), "--models-dir", str(folder), "models", "verify", *argv]
    )


def states(data_dir: Path) -> dict[str, str]:
    async def run() -> dict[str, str]:
        store = Store(data_dir)
        await store.open()
        try:
            rows = await store.db.fetchall("SELECT id, state FROM models")
            return {r["id"]: r["state"] for r in rows}
        finally:
            await store.close()

    return asyncio.run(run())


def test_models_help_lists_verify_and_rescan(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        parse(data_dir, "models", "--help")
    shown = capsys.readouterr().out
    assert "verify" in shown and "rescan" in shown


def test_verify_without_a_service_makes_a_changed_model_verified(
    data_dir: Path, folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_gguf(folder / "m.gguf")
    scan(data_dir, folder)
    touch_later(path)
    assert scan(data_dir, folder)["m"] == "changed"
    assert verify(data_dir, folder, "m") == 0
    out = capsys.readouterr().out
    assert "m: verified" in out
    assert states(data_dir)["m"] == "verified"
    assert scan(data_dir, folder)["m"] == "verified"  # the next start runs it


def test_verify_of_a_rewritten_file_says_how_to_accept_it(
    data_dir: Path, folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_gguf(folder / "m.gguf", context_length=2048)
    scan(data_dir, folder)
    write_gguf(path, context_length=8192, payload=b"new weights")
    touch_later(path)
    assert scan(data_dir, folder)["m"] == "changed"
    assert verify(data_dir, folder, "m") == 1
    err = capsys.readouterr().err
    assert "m: not verified" in err and "no longer matches" in err
    assert "lmsp-desktop models verify m --accept-new" in err
    assert states(data_dir)["m"] == "changed"
    assert verify(data_dir, folder, "m", "--accept-new") == 0
    assert "m: verified" in capsys.readouterr().out
    assert states(data_dir)["m"] == "verified"


def test_verify_of_a_cut_copy_says_what_it_is_and_offers_no_accept(
    data_dir: Path, folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_gguf(folder / "m.gguf", tensors={"blk.0.w": (1024, 1024)})
    scan(data_dir, folder)
    whole = path.read_bytes()
    path.unlink()
    path.write_bytes(whole[: len(whole) // 2])  # a cut copy over the verified file
    touch_later(path)
    assert scan(data_dir, folder)["m"] == "changed"
    assert verify(data_dir, folder, "m") == 1
    err = capsys.readouterr().err
    assert "not a whole model" in err and "shorter than its tensors need" in err, err
    assert "--accept-new" not in err  # a cut file is no candidate for the model's new file
    assert "Put the verified file back" in err


def test_verify_all_verifies_the_changed_and_missing_ones_only(
    data_dir: Path, folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    touched = write_gguf(folder / "a.gguf", payload=b"a")
    write_gguf(folder / "b.gguf", payload=b"b")
    gone = write_gguf(folder / "c.gguf", payload=b"c")
    scan(data_dir, folder)
    assert verify(data_dir, folder, "--all") == 0
    assert "No model needs verifying" in capsys.readouterr().out
    touch_later(touched)
    gone.unlink()
    assert scan(data_dir, folder) == {"a": "changed", "b": "verified", "c": "missing"}
    assert verify(data_dir, folder, "--all") == 1  # c is still missing
    captured = capsys.readouterr()
    assert "a: verified" in captured.out
    assert "b:" not in captured.out + captured.err  # verified and unchanged: not read again
    assert "c.gguf" in captured.err and "model_missing" not in captured.err
    assert states(data_dir) == {"a": "verified", "b": "verified", "c": "missing"}


def test_verify_usage_mistakes_exit_2(
    data_dir: Path, folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_gguf(folder / "m.gguf")
    scan(data_dir, folder)
    assert verify(data_dir, folder, "nope") == 2
    assert "nope" in capsys.readouterr().err
    assert admin(data_dir, "models", "verify") == 2
    assert "--all" in capsys.readouterr().err
    assert verify(data_dir, folder, "m", "--all") == 2
    capsys.readouterr()


def test_verify_of_a_model_in_a_folder_not_given_says_how_to_name_it(
    data_dir: Path, folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The folder was a `serve --models-dir` of one run: the command, given no folder, does
    not look in it (as a serve without it would not list the model), and says what to type."""
    write_gguf(folder / "m.gguf")
    scan(data_dir, folder)
    assert admin(data_dir, "models", "verify", "m") == 2
    err = capsys.readouterr().err
    assert f"lmsp-desktop --models-dir {folder.resolve()} models verify m" in err, err
    assert verify(data_dir, folder, "m") == 0
    assert "m: verified" in capsys.readouterr().out


def test_rescan_without_a_service_says_the_next_start_scans(
    data_dir: Path, folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_gguf(folder / "m.gguf")
    scan(data_dir, folder)
    assert admin(data_dir, "models", "rescan") == 0
    assert "lmsp-desktop serve" in capsys.readouterr().out


@pytest.fixture
def served(data_dir: Path, folder: Path) -> Iterator[LiveCore]:
    write_gguf(folder / "m.gguf")
    running = LiveCore(data_dir, model_dirs=[folder])
    try:
        yield running
    finally:
        running.stop()


def test_verify_and_rescan_beside_a_running_service_go_through_it(
    served: LiveCore, data_dir: Path, folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    registry = served.core.registry
    touch_later(folder / "m.gguf")
    served.call(registry.scan())
    assert served.call(registry.get("m")).state == "changed"
    assert verify(data_dir, folder, "m") == 0
    assert "m: verified" in capsys.readouterr().out
    # The service's own registry verified it (its kept rows too): it runs m now.
    assert served.call(registry.get("m")).state == "verified"
    write_gguf(folder / "n.gguf", payload=b"n")
    assert admin(data_dir, "models", "rescan") == 0
    assert "n: verified" in capsys.readouterr().out
    until_sync(lambda: served.call(registry.get("n")).state == "verified", 30, "n verified")
    # The commands' one-off admin clients are revoked when they end.
    clients = served.call(list_clients(served.core.store.db))
    assert clients and all(c["revoked"] for c in clients)
