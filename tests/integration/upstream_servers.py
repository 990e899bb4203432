"""Real upstreams for the upstream-engine tests: llama-cpp-python's own OpenAI-compatible
server, started on a free loopback port and killable with SIGKILL.

It serves the demo model cut to 4 of its 30 blocks (tests/support/cut_model.py): the tests
that use it are about the service passing requests, streams, cancels and kills through to
an upstream, never about what the upstream's model says, and its generations (300 tokens
after each kill) were most of their CPU."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from bench.llm import LLAMA_SERVER_MAIN
from tests.support.cut_model import cut_demo_model
from tests.support.polling import until_sync

ALIAS = "smol"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LlamaServer:
    """`python -m llama_cpp.server --model <the cut demo> --model_alias smol` on loopback."""

    def __init__(self, log_path: Path, api_key: str | None = None) -> None:
        self.port = free_port()
        self.log_path = log_path
        self.api_key = api_key
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self, timeout: float = 120.0) -> str:
        model = cut_demo_model()
        args = [
            sys.executable, "-c", LLAMA_SERVER_MAIN, "--model", str(model),
            "--host", "127.0.0.1", "--port", str(self.port), "--model_alias", ALIAS,
            "--n_threads", "1", "--interrupt_requests", "False",
        ]  # fmt: skip
        if self.api_key:
            args += ["--api_key", self.api_key]
        # The child keeps its own copy of the log's descriptor; ours is closed at once.
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                args,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        until_sync(self._answers, timeout, "llama_cpp.server to start", 0.2)
        return self.url

    def _answers(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"llama_cpp.server exited: {self.log()[-2000:]}")
        try:
            self.get("/models")
        except (OSError, urllib.error.URLError):
            return False
        return True

    def get(self, path: str) -> Any:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        request = urllib.request.Request(self.url + path, headers=headers)
        with urllib.request.urlopen(request, timeout=5) as response:
            return json.loads(response.read())

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def chat_stream(self, body: dict[str, Any]) -> list[str]:
        """The content deltas of a streamed chat completion read directly from it."""
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(
            self.url + "/chat/completions",
            data=json.dumps({**body, "stream": True}).encode(),
            headers=headers,
        )
        pieces = []
        with urllib.request.urlopen(request, timeout=120) as response:
            for raw in response:
                line = raw.decode().strip()
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                for choice in json.loads(line[6:]).get("choices", []):
                    content = choice.get("delta", {}).get("content")
                    if content:
                        pieces.append(content)
        return pieces
