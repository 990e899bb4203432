"""The command line: global flags work before or after the subcommand."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import pytest

from lmsp_desktop import app
from lmsp_desktop.cli import build_parser, serve
from lmsp_desktop.core.errors import LmspError


def test_data_dir_and_port_work_after_serve() -> None:
    args = build_parser().parse_args(["serve", "--data-dir", "/x/data", "--port", "0"])
    assert args.data_dir == Path("/x/data") and args.port == 0


def test_flags_before_the_subcommand_are_kept() -> None:
    args = build_parser().parse_args(["--data-dir", "/a", "--port", "7", "serve"])
    assert args.data_dir == Path("/a") and args.port == 7


def test_data_dir_after_an_admin_command() -> None:
    args = build_parser().parse_args(
        ["token", "create", "--name", "n", "--scopes", "admin", "--data-dir", "/b"]
    )
    assert args.data_dir == Path("/b")


def test_log_level_after_serve() -> None:
    assert build_parser().parse_args(["serve", "--log-level", "DEBUG"]).log_level == "DEBUG"


class _FailingCore:
    """A Core double whose start fails (port in use) and whose cleanup fails too."""

    made: ClassVar[list[_FailingCore]] = []

    def __init__(self, *args: object, **kwargs: object) -> None:
        self.stopped = False
        self.made.append(self)

    async def start(self) -> str:
        raise LmspError("Port 5677 is in use.", code="port_in_use", status=503)

    async def stop(self) -> None:
        self.stopped = True
        raise RuntimeError("the store would not close")


async def test_serve_reports_why_the_start_failed_even_if_the_cleanup_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`lmsp-desktop serve` prints the start's own error ("port in use"), not the cleanup's."""
    monkeypatch.setattr(app, "Core", _FailingCore)
    args = build_parser().parse_args(["serve", "--data-dir", "/x/data", "--port", "5677"])
    with pytest.raises(LmspError, match="in use"):
        await serve(args)
    assert [core.stopped for core in _FailingCore.made] == [True]  # it did clean up
