"""`lmsp-desktop models list` lists what the service lists, run beside a real `serve` and
with none running: a one-run `--models-dir`'s model is listed beside the run that was given
it, and neither beside a later run without it nor with no service at all (it read every
stored row then, the earlier run's model among them, which GET /v1/models and the Models
page hide: 88fc016)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lmsp_desktop.cli import build_parser
from lmsp_desktop.cli_model_settings import run_model_settings
from lmsp_desktop.core.models.registry import ModelRegistry
from lmsp_desktop.core.storage.store import Store
from tests.integration.serve_process import ServeProcess, call, create_token, lmsp
from tests.support import model_stores as stores
from tests.support.model_stores import demo, fresh_home, place

DEMO = "smollm2-135m-instruct"


def cli_list(data: Path) -> set[str]:
    listed = lmsp("models", "list", "--json", data_dir=data)
    assert listed.returncode == 0, listed.stderr
    return {row["id"] for row in json.loads(listed.stdout)}


def served(url: str, token: str) -> set[str]:
    status, body = call(f"{url}/v1/models", token)
    assert status == 200, body
    return {m["id"] for m in body["data"] if m["owned_by"] == "local"}


def test_models_list_shows_what_the_service_lists_with_and_without_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fresh_home(tmp_path, monkeypatch)  # no model of this machine's stores
    data = tmp_path / "data"
    data.mkdir()
    folder = tmp_path / "one-run"
    place(demo(), folder / "smol.gguf")
    token = create_token(data)

    one_run = ServeProcess(data, "--models-dir", str(folder))
    one_run.start()
    try:
        assert served(one_run.url, token) == {DEMO, "smol"}
        assert cli_list(data) == {DEMO, "smol"}  # beside the run given the folder
    finally:
        one_run.terminate()

    later = ServeProcess(data)
    later.start()
    try:
        assert served(later.url, token) == {DEMO}  # its folder is not looked in
        assert cli_list(data) == {DEMO}
    finally:
        later.terminate()

    # No service: the list a service started now would give, not every stored row.
    assert cli_list(data) == {DEMO}  # was {DEMO, "smol"}
    refused = lmsp("models", "set", "smol", "--context", "4096", data_dir=data)
    assert refused.returncode == 2 and "no local model named 'smol'" in refused.stderr


async def test_models_list_names_each_tag_of_a_blob_and_where_it_was_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store: Store, capsys: Any
) -> None:
    """`ollama pull smollm2` then `ollama pull smollm2:135m`: the window shows one row,
    "smollm2:135m (also :latest)" from Ollama; `models list` showed `smollm2:135m` alone and
    its `--json` had neither the aliases nor the source (GET /v1/models has both)."""
    home = fresh_home(tmp_path, monkeypatch)
    stores.add_ollama_model(home, "smollm2", "latest")
    blob = stores.add_ollama_model(home, "smollm2", "135m")
    registry = ModelRegistry(store.db, [], include_demo=False, sources=("ollama",))
    await registry.scan()
    await registry.close()

    args = build_parser().parse_args(["models", "list"])
    assert await run_model_settings("models.list", args, store) == 0
    [header, row] = capsys.readouterr().out.splitlines()
    assert header.split()[:3] == ["NAME", "SOURCE", "STATE"]
    assert row.startswith("smollm2:135m (also :latest)  Ollama  verified"), row

    args = build_parser().parse_args(["models", "list", "--json"])
    assert await run_model_settings("models.list", args, store) == 0
    [listed] = json.loads(capsys.readouterr().out)
    assert (listed["id"], listed["aliases"], listed["source"]) == (
        "smollm2:135m",
        ["smollm2:latest"],
        "ollama",
    )
    assert Path(listed["path"]) == blob
