"""The command line: global flags work before or after the subcommand."""

from __future__ import annotations

from pathlib import Path

from lmsp_desktop.cli import build_parser


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
