"""`models list` plans with a running service's `--max-context` only while that service
answers (review of 93cf244): a service.json left by a killed service may name a pid that
another process has since been given, and must not cap the list."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from lmsp_desktop.cli_model_settings import running_max_context


class _Health(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/v1/health" else 404)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def answering() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), _Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def announce(data_dir: Path, url: str) -> None:
    # The pid is alive (this test's own): only the URL tells a dead service from a live one.
    service = {"url": url, "pid": os.getpid(), "started_at": 0, "max_context": 2048}
    (data_dir / "service.json").write_text(json.dumps(service))


def test_a_service_that_answers_caps_the_list(tmp_path: Path, answering: str) -> None:
    announce(tmp_path, answering)
    assert running_max_context(tmp_path) == 2048


def test_a_service_json_left_by_a_killed_service_is_ignored(tmp_path: Path) -> None:
    with HTTPServer(("127.0.0.1", 0), _Health) as gone:  # a port nobody listens on after
        url = f"http://127.0.0.1:{gone.server_address[1]}"
    announce(tmp_path, url)
    assert running_max_context(tmp_path) is None


def test_no_service_json_means_no_service(tmp_path: Path) -> None:
    assert running_max_context(tmp_path) is None
