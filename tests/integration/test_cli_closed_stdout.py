"""A reader that closes the command's stdout early (`lmsp-desktop tasks | head -2`): every
command ends quietly, with no BrokenPipeError traceback on stderr."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.integration.serve_process import ServeProcess, create_token


def with_stdout_closed(data_dir: Path, *args: str) -> tuple[int, str]:
    """Run a command whose stdout pipe has no reader left (closed before it writes, as
    `head` leaves it once it has its lines): its exit status and stderr."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "lmsp_desktop", "--data-dir", str(data_dir), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    proc.stdout.close()
    _, err = proc.communicate(timeout=60)
    return proc.returncode, err


def test_commands_end_quietly_when_their_reader_is_gone(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    create_token(data_dir, "admin")
    serve = ServeProcess(data_dir)
    serve.start()
    try:
        for command in (["tasks"], ["models", "list"], ["token", "create", "--name", "n"]):
            code, err = with_stdout_closed(data_dir, *command)
            assert "Traceback" not in err and "BrokenPipe" not in err, (command, err)
            assert err == "", (command, err)
            assert code == 1, command  # the output was cut short
    finally:
        assert serve.terminate() == 0
