"""Counts said in words a reader expects: "1 task", "1 local model", not "1 tasks"."""

from __future__ import annotations

import logging

import pytest

from lmsp_desktop.app import Core
from lmsp_desktop.cli_model_check import _print_scanned
from lmsp_desktop.core.views import RecoveryItem, RecoveryReport


def item(n: int) -> RecoveryItem:
    return RecoveryItem(
        f"dl_{n}", "org/repo:Q4_K_M", "running", "resume", "running", "response.resumed", 3
    )


@pytest.mark.parametrize(
    ("count", "said"), [(1, "recovery: 1 task after"), (2, "recovery: 2 tasks after")]
)
def test_the_recovery_log_line_counts_tasks(
    caplog: pytest.LogCaptureFixture, count: int, said: str
) -> None:
    caplog.set_level(logging.INFO, logger="lmsp_desktop.app")
    Core._log_report(RecoveryReport(0.0, 1.0, [item(n) for n in range(count)]))
    assert said in caplog.text, caplog.text


@pytest.mark.parametrize(("count", "said"), [(1, ": 1 local model."), (3, ": 3 local models.")])
def test_a_rescan_counts_local_models(
    capsys: pytest.CaptureFixture[str], count: int, said: str
) -> None:
    models = [{"id": f"m{n}", "state": "ready", "verified_at": 1} for n in range(count)]
    _print_scanned(models)
    assert said in capsys.readouterr().out
