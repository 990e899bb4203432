"""Two real `serve` starts on two data folders of one machine (one user cache directory):
the demo model is read whole to verify it once, not once per data folder (digest_cache.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lmsp_desktop.core.models.demo import DEMO_MODEL_ID, demo_model_path
from tests.integration.serve_process import ServeProcess, call, create_token
from tests.support.polling import until_sync


def demo_once_verified(data_dir: Path) -> tuple[dict[str, Any], str]:
    """The demo model as a fresh `serve` on `data_dir` lists it once it is verified, and
    what that service logged."""
    token = create_token(data_dir)
    server = ServeProcess(data_dir)
    url = server.start()
    try:

        def verified() -> dict[str, Any] | None:
            status, body = call(url + "/v1/models", token)
            assert status == 200, body
            [model] = [m for m in body["data"] if m["id"] == DEMO_MODEL_ID]
            return model if model["verified_at"] is not None else None

        model = until_sync(verified, limit=60, what="the demo model verified")
    finally:
        assert server.terminate() == 0
    return model, server.stderr()


def test_a_second_data_folder_does_not_hash_the_demo_model_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LMSP_CACHE_DIR", str(tmp_path / "cache"))  # this machine, new
    path = demo_model_path()
    assert path is not None
    hashing = f"hashing {path}"

    first, first_log = demo_once_verified(tmp_path / "data-a")
    assert first_log.count(hashing) == 1, first_log

    second, second_log = demo_once_verified(tmp_path / "data-b")
    assert hashing not in second_log, second_log
    assert f"{path}: digest of the unchanged file from" in second_log
    assert second["state"] == "unloaded"  # runnable: verified, not hashing nor changed
    assert second["digest"] == first["digest"]
