"""`serve --log-level DEBUG` is for debugging a client: one line per request (method, path,
status, time, client name, the task it made), model loads and a client-gone cancel at INFO,
and none of the libraries' chatter. A reviewer's 33 minutes at DEBUG got 38,708 aiosqlite
lines of polling SELECTs (some with token hashes), the log rotated twice, and not one line
about the requests, their 401/404s or the loads. A real `serve` process, the demo model,
real HTTP."""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path
from urllib.parse import urlsplit

from lmsp_desktop.core.auth import token_hash
from tests.integration.serve_process import ServeProcess, call, create_token
from tests.support.polling import until_sync

DEMO = "smollm2-135m-instruct"
CLIENT = "debug-log-client"


def request_lines(log: str) -> list[str]:
    return [line for line in log.splitlines() if " lmsp_desktop.requests: " in line]


def log_file(data_dir: Path) -> str:
    return (data_dir / "logs" / "lmsp-desktop.log").read_text()


def stream_then_leave(url: str, token: str) -> None:
    """A streaming create whose client goes away at its first delta (a closed terminal)."""
    body = json.dumps(
        {
            "model": DEMO,
            "input": "Write a very long story about a dragon who learns to bake bread.",
            "max_output_tokens": 400,
            "temperature": 0,
            "stream": True,
        }
    ).encode()
    where = urlsplit(url)
    assert where.hostname is not None and where.port is not None
    with socket.create_connection((where.hostname, where.port), timeout=60) as sock:
        sock.sendall(
            f"POST /v1/responses HTTP/1.1\r\nHost: {where.netloc}\r\n"
            f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        seen = b""
        while b"response.output_text.delta" not in seen:
            chunk = sock.recv(65536)
            assert chunk, seen.decode(errors="replace")
            seen += chunk


def test_debug_logs_each_request_loads_and_cancels_without_library_chatter(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    token = create_token(data_dir, name=CLIENT)
    serve = ServeProcess(data_dir, "--log-level", "DEBUG")
    url = serve.start()
    try:
        status, created = call(
            f"{url}/v1/responses?api_key=query-secret",
            token,
            "POST",
            {"model": DEMO, "input": "Say hi.", "max_output_tokens": 4},
        )
        assert status == 200, created
        assert call(f"{url}/v1/models", "lmsp_not-a-token")[0] == 401
        assert call(f"{url}/v1/no-such-route%0Aforged", token)[0] == 404
        stream_then_leave(url, token)
        cancelled = re.compile(
            r" INFO \S+: task (resp_\S+) cancelled: its (stream's )?client went away"
        )
        found = until_sync(
            lambda: cancelled.search(log_file(data_dir)),
            60,
            lambda: f"a client-gone cancel in the log: {log_file(data_dir)[-3000:]}",
        )
        status, _ = call(f"{url}/v1/models/{DEMO}/unload", token, "POST")
        assert status == 200
        until_sync(lambda: f"INFO lmsp_desktop.core.runner: {DEMO} unloaded" in log_file(data_dir))
    finally:
        assert serve.terminate() == 0, serve.stderr()[-2000:]

    for log in (log_file(data_dir), serve.stderr()):
        lines = request_lines(log)
        create = [line for line in lines if f"task={created['id']}" in line]
        assert len(create) == 1, lines
        assert "POST /v1/responses 200 " in create[0], create
        assert create[0].endswith(f" ms client={CLIENT} task={created['id']}"), create
        assert len([line for line in lines if "GET /v1/models 401 " in line]) == 1, lines
        # As sent: a newline in the path does not forge a line of the log.
        assert len([line for line in lines if "GET /v1/no-such-route%0Aforged 404 " in line]) == 1
        assert not any(line.startswith("forged") for line in log.splitlines()), log
        assert all(re.search(r" \d+ ms client=", line) for line in lines), lines
        # The stream that was left: its line too, after its cancel, with its task.
        assert len([line for line in lines if f"task={found.group(1)}" in line]) == 1, lines
        assert f"INFO lmsp_desktop.core.runner: {DEMO} loaded" in log
        assert "aiosqlite" not in log and "asyncio" not in log
        assert token not in log and token_hash(token) not in log
        assert "query-secret" not in log


def test_info_logs_no_request_lines(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    token = create_token(data_dir, name=CLIENT)
    serve = ServeProcess(data_dir)  # --log-level INFO, the default
    url = serve.start()
    try:
        assert call(f"{url}/v1/models", token)[0] == 200
        assert call(f"{url}/v1/models", "lmsp_not-a-token")[0] == 401
        assert call(f"{url}/v1/no-such-route", token)[0] == 404
    finally:
        assert serve.terminate() == 0, serve.stderr()[-2000:]
    for log in (log_file(data_dir), serve.stderr()):
        assert "recovery:" in log  # the log is written: it has no request lines
        assert request_lines(log) == [] and " DEBUG " not in log, log
