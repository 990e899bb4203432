"""The Events tab's Data column for a download's progress: the bytes, the share, the speed,
or that it waits for the hub and until when (the column was empty)."""

from __future__ import annotations

import time

from lmsp_desktop.gui.format import clock
from lmsp_desktop.gui.models.event_table import summary

MIB = 1024 * 1024


def test_a_progress_event_says_how_far_and_how_fast() -> None:
    event = {
        "type": "download.progress",
        "bytes_done": int(39.2 * MIB),
        "bytes_total": int(98.4 * MIB),
        "bytes_per_s": int(4.1 * MIB),
    }
    assert summary("download.progress", event) == "39.2 MiB of 98.4 MiB (39%), 4.1 MiB/s"


def test_a_waiting_event_says_until_when() -> None:
    at = time.time() + 8
    event = {
        "type": "download.progress",
        "bytes_done": 0,
        "bytes_total": 2048,
        "bytes_per_s": None,
        "retry_at": at,
        "retry_reason": "The Hugging Face hub at … cannot be reached (Connection refused).",
    }
    said = summary("download.progress", event)
    assert said == f"0 B of 2.0 KiB (0%); waiting for the hub, next try at {clock(at)}"
