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
    assert "976.6 KiB / 2.9 MiB" in line
    assert line.rstrip().endswith(
        f"waiting for the hub, next try at {time.strftime('%H:%M:%S', time.localtime(at))}"
    )


def test_the_progress_line_reads_sizes_as_the_window_does(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The walk: `models pull` printed "0.8 / 3.1 MB" while the window showed
    "768.0 KiB / 3.0 MiB" for the same download."""
    Progress("lmsp-test/Tiny-GGUF:Q4_K_M").event(
        {
            "type": "download.progress",
            "bytes_done": 768 * 1024,
            "bytes_total": 3 * 1024 * 1024,
            "bytes_per_s": 1536 * 1024,
        }
    )
    line = capsys.readouterr().out.strip()
    assert line == "768.0 KiB / 3.0 MiB  25.0 % 1.5 MiB/s"
