"""A real `lmsp-desktop serve` process for integration tests: start, token, SIGKILL, restart."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from lmsp_desktop.core.auth import parse_scopes
from lmsp_desktop.core.storage.clients import create_client
from lmsp_desktop.core.storage.store import Store

LISTENING = re.compile(r"^LMSP service listening on (http://\S+)$")


def lmsp(*args: str, data_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lmsp_desktop", "--data-dir", str(data_dir), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def create_token(data_dir: Path, scopes: str = "admin", name: str = "tests") -> str:
    """A client's token, made as `lmsp-desktop token create --name NAME --scopes SCOPES`
    makes it (the store opened on the data directory, creating it if need be, and
    create_client), in this process: a CLI process per token cost ~1.5 s of start-up and
    imports, for set-up no test is about (test_cli_admin runs the command itself). On a
    thread of its own, so that it runs the same from a test with a running loop."""

    async def create() -> str:
        store = Store(data_dir)
        await store.open()
        try:
            _client, token = await create_client(store.db, name, parse_scopes(scopes, "--scopes"))
        finally:
            await store.close()
        return token

    with ThreadPoolExecutor(1) as thread:
        return thread.submit(asyncio.run, create()).result()


class ServeProcess:
    """`python -m lmsp_desktop serve` on a data directory, port 0."""

    def __init__(self, data_dir: Path, *extra: str) -> None:
        self.data_dir = data_dir
        self.extra = extra
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""
        self.stderr_path = data_dir.parent / f"serve-{data_dir.name}.err"

    def start(self, timeout: float = 60.0) -> str:
        # The child keeps its own copy of the log's descriptor; ours is closed at once.
        with self.stderr_path.open("a") as err:
            self.proc = self._spawn(err)
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                self._reap()
                raise AssertionError(f"serve exited: {self.stderr_path.read_text()[-2000:]}")
            found = LISTENING.match(line.strip())
            if found:
                self.url = found.group(1)
                return self.url
        raise AssertionError("serve did not start in time")

    def _spawn(self, err: Any) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "lmsp_desktop",
                "--data-dir",
                str(self.data_dir),
                "serve",
                "--port",
                "0",
                *self.extra,
            ],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )

    def _reap(self, timeout: float = 10.0) -> int:
        """Wait for the process to end and close our end of its stdout pipe."""
        assert self.proc is not None
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            if self.proc.stdout is not None:
                self.proc.stdout.close()

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self._reap()

    def exit_code(self, timeout: float = 15.0) -> int:
        """Once the process has ended (after a signal sent to `proc`), its exit code."""
        return self._reap(timeout)

    def terminate(self, timeout: float = 15.0) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self._reap(timeout)

    def stderr(self) -> str:
        return self.stderr_path.read_text()


def call(
    url: str,
    token: str,
    method: str = "GET",
    body: Any = None,
    headers: dict[str, str] | None = None,
    timeout: float = 60,
) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        url,
        data=data,
        method=method,
        headers={
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/json",
            **(headers or {}),
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        with exc:  # the error holds the open response: close it, or its socket leaks
            return exc.code, json.loads(exc.read() or b"null")
