"""`models pull` following a download that waits for the hub says so on its progress line
(it printed the same bytes again, as if stuck)."""

from __future__ import annotations

import time

import pytest

from lmsp_desktop.cli_models import Progress


def test_a_wait_for_the_hub_is_on_the_progress_line(capsys: pytest.CaptureFixture[str]) -> None:
    at = time.time() + 4
    Progress("lmsp-test/Tiny-GGUF:Q4_K_M").event(
        {
            "type": "download.progress",
            "bytes_done": 1_000_000,
            "bytes_total": 3_000_000,
            "bytes_per_s": None,
            "retry_at": at,
            "retry_reason": "The Hugging Face hub … cannot be reached (Connection refused).",
        }
    )
    line = capsys.readouterr().out
    assert "1.0 / 3.0 MB" in line
    assert line.rstrip().endswith(
        f"waiting for the hub, next try at {time.strftime('%H:%M:%S', time.localtime(at))}"
    )
