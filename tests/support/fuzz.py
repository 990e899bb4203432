"""Schemathesis against a running real Core: its own /v1/openapi.json, every check, an admin
token. The Core (real SQLite file, real aiohttp server on port 0) runs the scripted FakeEngine
so that the many valid creates schemathesis sends finish at once."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lmsp_desktop.app import Core
from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.core.storage.clients import create_client

ST = Path(sys.executable).with_name("st")
CONFIG = """
[[operations]]
include-path-regex = "^/v1/pairing/(claim|[^/]+/token)$"
checks.positive_data_acceptance.expected-statuses = ["200", "400", "404", "429"]

# Function tools must have unique names (a 400 naming `tools`, as OpenAI answers), which JSON
# Schema cannot say of an array of objects; every other check still runs on these routes.
[[operations]]
include-path-regex = "^/v1/(responses|chat/completions)$"
include-method = "POST"
checks.positive_data_acceptance.expected-statuses = [
    "2xx", "3xx", "400", "401", "403", "404", "409", "429", "5xx",
]
"""


@dataclass
class FuzzResult:
    returncode: int
    cases: int
    failures: int
    output: str
    failure_kinds: dict[str, int]

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and self.failures == 0 and self.cases > 0

    def summary(self) -> str:
        return (
            f"fuzz: schemathesis cases={self.cases} failures={self.failures} "
            f"{self.failure_kinds or ''} rc={self.returncode}"
        )


class ThreadedCore:
    """A Core on its own loop in a daemon thread, so a subprocess can be waited on meanwhile."""

    def __init__(self, data_dir: Path) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self.core = Core(data_dir, port=0, engine=FakeEngine(token_delay=0.0))
        self.url: str = self.call(self.core.start())

    def call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(120)

    def token(self, *scopes: str) -> str:
        _, secret = self.call(create_client(self.core.store.db, "fuzzer", frozenset(scopes)))
        return str(secret)

    def stop(self) -> None:
        try:
            self.call(self.core.stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
            self.loop.close()


def run_schemathesis(
    workdir: Path,
    examples: int,
    *,
    seed: int = 1,
    exclude: tuple[str, ...] = (),
    timeout: float = 1800,
) -> FuzzResult:
    """`st run` with `--checks all` (minus `exclude`) against a fresh Core."""
    workdir.mkdir(parents=True, exist_ok=True)
    # A wrong one-time pairing code or secret is refused with 400 `invalid_grant`, as RFC 8628
    # and OAuth do, however well-formed it is: that is not a schema-valid request rejected.
    (workdir / "schemathesis.toml").write_text(CONFIG)
    running = ThreadedCore(workdir / "data")
    try:
        token = running.token("admin")
        done = subprocess.run(
            [
                str(ST),
                "run",
                f"{running.url}/v1/openapi.json",
                "--checks",
                "all",
                *(["--exclude-checks", ",".join(exclude)] if exclude else []),
                "--max-examples",
                str(examples),
                "--seed",
                str(seed),
                "--header",
                f"Authorization: Bearer {token}",
                "--generation-database",
                "none",
                "--workers",
                "1",
                "--no-color",
                "--request-timeout",
                "30",
                "--report",
                "junit",
                "--report-dir",
                str(workdir / "report"),
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            cwd=workdir,
        )
    finally:
        running.stop()
    output = done.stdout + done.stderr
    return FuzzResult(
        done.returncode,
        _count(output, r"(\d+) generated"),
        _failures(output),
        output,
        {name: int(n) for name, n in re.findall(r"❌ (ST\d+ [^:\n]+): (\d+)", output)},
    )


def _count(text: str, pattern: str) -> int:
    return sum(int(m) for m in re.findall(pattern, text))


def _failures(text: str) -> int:
    found = re.findall(r"(\d+) (?:failures?|errors?)\b", text)
    return sum(int(n) for n in found)
