"""`models pull` of a file the service then refuses to run (the fake hub's Tiny files are no
GGUF: their header is unreadable) says so, with the reason `models list` gives, and exits
non-zero; it said "Done: verified … Use it as the model …". Through a running service (a
real Core with its DownloadManager) and without one; the fake hub on loopback."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.service_fixtures import LiveCore, cli_beside
from tests.support.hub_repos import DEMO_REPO, TINY_REPO, Hub

pytest_plugins = ["tests.integration.download_fixtures"]
pytestmark = pytest.mark.slow

TINY_ID = "lmsp-test/tiny-gguf:q4_k_m"  # as the service lists the pulled file


def reason_line(out: str) -> str:
    """The `ID: STATE: REASON` line (unwrapped) a command says of the Tiny model."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{TINY_ID}: "))
    rest = [line.strip() for line in lines[start + 1 :] if line.startswith("  ")]
    return " ".join([lines[start], *rest])


async def test_a_pulled_file_the_service_cannot_run_fails_the_pull_with_its_reason(
    hub: Hub, tmp_path: Path
) -> None:
    live = await asyncio.to_thread(LiveCore, tmp_path / "data")
    try:
        pulled = await asyncio.to_thread(cli_beside, live, "models", "pull", f"{TINY_REPO}:Q4_K_M")
        assert pulled.returncode == 1, pulled.stdout + pulled.stderr
        assert "Done" not in pulled.stdout and "Use it as" not in pulled.stdout
        said = reason_line(pulled.stderr)
        assert said.startswith(f"{TINY_ID}: invalid: cannot read the GGUF header"), said
        # The reason `models list` gives the same model, word for word.
        listed = await asyncio.to_thread(cli_beside, live, "models", "list")
        assert reason_line(listed.stdout) == said
        # A file that runs still ends with the id to use.
        good = await asyncio.to_thread(cli_beside, live, "models", "pull", DEMO_REPO)
        assert good.returncode == 0, good.stderr
        assert "Use it as the model lmsp-test/smollm2-135m-instruct-gguf:q4_1." in good.stdout
    finally:
        await asyncio.to_thread(live.stop)


async def test_without_a_service_the_pull_reads_the_header_the_service_will(
    hub: Hub, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    command = [sys.executable, "-m", "lmsp_desktop", "--data-dir", str(data_dir)]
    pulled = await asyncio.to_thread(
        subprocess.run,
        [*command, "models", "pull", f"{TINY_REPO}:q4_k_m"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert pulled.returncode == 1, pulled.stdout + pulled.stderr
    assert "no service is running" in pulled.stdout and "Done" not in pulled.stdout
    said = reason_line(pulled.stderr)
    assert said.startswith(f"{TINY_ID}: invalid: cannot read the GGUF header"), said
    # What a service started now says of it: the same reason.
    live = await asyncio.to_thread(LiveCore, data_dir)
    try:
        listed = await asyncio.to_thread(cli_beside, live, "models", "list")
        assert reason_line(listed.stdout) == said
    finally:
        await asyncio.to_thread(live.stop)
