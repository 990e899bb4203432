"""Case A of the review, end to end with the real `serve` process and the real CLI: a copy of
the demo model cut short (`truncate -s 49181216`) is refused 409 model_changed; the identical
file copied back stays refused, across a restart too, until `lmsp-desktop models verify`
(beside the running service, and without one), after which the request runs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lmsp_desktop.core.models.demo import demo_model_path
from tests.integration.serve_process import ServeProcess, call, create_token
from tests.support.polling import until_sync

pytestmark = pytest.mark.slow
CUT_SIZE = 49_181_216
ASK = {"model": "good", "input": "Say hi.", "max_output_tokens": 4, "temperature": 0}


def cli(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "LMSP_TOKEN"}
    return subprocess.run(
        [sys.executable, "-m", "lmsp_desktop", "--data-dir", str(data_dir), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )


def good(url: str, token: str) -> dict[str, Any]:
    status, model = call(f"{url}/v1/models/good", token)
    assert status == 200, model
    return model  # type: ignore[no-any-return]


def start(data_dir: Path, models: Path, token: str) -> tuple[ServeProcess, str]:
    server = ServeProcess(data_dir, "--models-dir", str(models))
    url = server.start()
    # The start-up scan records the file in the background: wait until it has settled.
    until_sync(
        lambda: good(url, token)["state"] != "unloaded" or good(url, token)["verified_at"],
        60,
        "good.gguf to be checked",
    )
    return server, url


def test_a_touched_model_is_verified_again_headless_and_runs(tmp_path: Path) -> None:
    demo = demo_model_path()
    assert demo is not None
    data_dir, models = tmp_path / "data", tmp_path / "models"
    models.mkdir()
    path = models / "good.gguf"
    shutil.copyfile(demo, path)
    token = create_token(data_dir)

    server, url = start(data_dir, models, token)
    try:
        assert good(url, token)["verified_at"] is not None
        os.truncate(path, CUT_SIZE)
        status, answer = call(f"{url}/v1/responses", token, "POST", ASK)
        assert (status, answer["error"]["code"]) == (409, "model_changed"), answer
        assert "lmsp-desktop models verify good" in answer["error"]["message"]
        shutil.copyfile(demo, path)  # the identical full file back
        status, answer = call(f"{url}/v1/responses", token, "POST", ASK)
        assert status == 409 and answer["error"]["code"] == "model_changed"
    finally:
        assert server.terminate() == 0

    server, url = start(data_dir, models, token)  # a restart does not clear it: on purpose
    try:
        assert good(url, token)["state"] == "changed"
        done = cli(data_dir, "models", "verify", "good")  # through the running service
        assert done.returncode == 0, done.stderr
        assert "good: verified" in done.stdout
        status, answer = call(f"{url}/v1/responses", token, "POST", ASK)
        assert status == 200, answer
        assert answer["status"] in ("completed", "incomplete") and answer["output_text"]
        os.truncate(path, CUT_SIZE)
        status, answer = call(f"{url}/v1/responses", token, "POST", ASK)
        assert status == 409 and answer["error"]["code"] == "model_changed"
    finally:
        assert server.terminate() == 0

    shutil.copyfile(demo, path)
    # No service runs: the command verifies, given the folder as serve was (one run's flag).
    done = cli(data_dir, "--models-dir", str(models), "models", "verify", "good")
    assert done.returncode == 0, done.stderr
    assert "good: verified" in done.stdout
    server, url = start(data_dir, models, token)
    try:
        status, answer = call(f"{url}/v1/responses", token, "POST", ASK)
        assert status == 200, answer
        assert answer["status"] in ("completed", "incomplete")
    finally:
        assert server.terminate() == 0
