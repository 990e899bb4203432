"""A real running service for integration tests: Core on a temp data dir, port 0, demo model.

The Core runs on its own event loop in a background thread, so that async tests (aiohttp on
their own loop) and the synchronous `openai` SDK can all talk to it over real HTTP without
sharing a loop. One Core serves the whole test session; each test isolates itself by
creating its own client token (a non-admin client sees only its own tasks).

Use from a test module with `pytest_plugins = ["tests.integration.service_fixtures"]`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import itertools
import json
import os
import struct
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import pytest

from lmsp_desktop.app import Core
from lmsp_desktop.core.storage.clients import create_client, revoke_client
from tests.integration.serve_process import call, lmsp
from tests.support.polling import until, until_sync

MODEL = "smollm2-135m-instruct"
ALL_SCOPES = ("models:read", "responses:read", "responses:write", "admin")
USER_SCOPES = ("models:read", "responses:read", "responses:write")
# Short, deterministic generations keep the suite fast on a shared CPU.
SHORT = {"max_output_tokens": 12, "temperature": 0}
# A prompt and budget long enough to still be running when a test cancels it.
LONG = {
    "input": "Write a very long story about a dragon who learns to bake bread.",
    "max_output_tokens": 400,
    "temperature": 0,
}
T = TypeVar("T")
_names = itertools.count(1)


class LiveCore:
    """A `Core(data_dir, port=0)` with the real demo model, on a loop in a daemon thread."""

    def __init__(
        self, data_dir: Path, model_dirs: list[Path] | None = None, engine: Any = None
    ) -> None:
        self.data_dir = data_dir
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="live-core")
        self._thread.start()
        self.core = Core(data_dir, port=0, model_dirs=model_dirs, engine=engine)
        self._stopping: concurrent.futures.Future[None] | None = None
        self.url = self.call(self.core.start(), timeout=120)
        # The start-up scan hashes in the background: the tests here read the demo model's
        # digest and state as a settled service shows them.
        self.call(self.core.registry.gate.wait_settled(), timeout=120)
        self.call(self._one_task_per_model())
        self.port = int(self.url.rsplit(":", 1)[1])

    async def _one_task_per_model(self) -> None:
        """The queue tests hold the model with one long task (occupy_model) so that the next
        ones stay queued: one concurrent request per model here (the default is 4; the
        batching has its own tests, test_llama_batching.py and test_service_prefix_cache.py)."""
        settings = dataclasses.replace(self.core.settings, parallel_per_model=1)
        self.core.apply_settings(settings)

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 60) -> T:
        """Run a coroutine on the Core's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def token(self, *scopes: str, name: str | None = None) -> str:
        """A fresh client with these scopes; returns its bearer token."""
        label = name or f"test-client-{next(_names)}"
        _, token = self.call(create_client(self.core.store.db, label, frozenset(scopes)))
        return token

    def client(self, *scopes: str) -> Client:
        label = f"test-client-{next(_names)}"
        info, token = self.call(create_client(self.core.store.db, label, frozenset(scopes)))
        return Client(info["id"], token)

    def revoked_token(self) -> str:
        info, token = self.call(
            create_client(self.core.store.db, f"revoked-{next(_names)}", frozenset(ALL_SCOPES))
        )
        self.call(revoke_client(self.core.store.db, info["id"]))
        return token

    def stop_started(self) -> concurrent.futures.Future[None]:
        """Start `Core.stop()` on its loop (once), from any thread; the future of its end."""
        if self._stopping is None:
            self._stopping = asyncio.run_coroutine_threadsafe(self.core.stop(), self.loop)
        return self._stopping

    def begin_stop(self) -> asyncio.Future[None]:
        """Start `Core.stop()` on its loop; await the result from another loop."""
        return asyncio.wrap_future(self.stop_started())

    def stop(self) -> None:
        """Stop the Core (if no test did), then its loop and thread."""
        try:
            if self._stopping is None:
                self._stopping = asyncio.run_coroutine_threadsafe(self.core.stop(), self.loop)
            self._stopping.result(60)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
            self.loop.close()


@dataclass(frozen=True)
class Client:
    id: str
    token: str

    @property
    def headers(self) -> dict[str, str]:
        return auth(self.token)


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture(scope="session")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveCore]:
    running = LiveCore(tmp_path_factory.mktemp("live-core"))
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def broken_live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveCore]:
    """A second live service whose model folder holds `broken.gguf`: a well-formed GGUF
    header (so the registry's check passes and it is verified) over no usable model, which
    llama.cpp refuses when a task loads it. (A file whose header is already wrong is listed as
    "not a model" and never runs: tests/unit/gui/test_models_page.py.)"""
    folder = tmp_path_factory.mktemp("broken-models")
    header = b"GGUF" + struct.pack("<IQQ", 3, 0, 0)  # version 3, no tensors, no key-values
    (folder / "broken.gguf").write_bytes(header + b"not a model" * 100)
    running = LiveCore(tmp_path_factory.mktemp("broken-core"), model_dirs=[folder])
    until_sync(
        lambda: running.call(running.core.registry.get(BROKEN)).state == "verified",
        60,
        "broken.gguf to be verified",
        0.05,
    )
    try:
        yield running
    finally:
        running.stop()


BROKEN = "broken"


@pytest.fixture
async def http(live: LiveCore) -> AsyncIterator[aiohttp.ClientSession]:
    """An aiohttp client on the test's loop, addressed at the live service."""
    async with aiohttp.ClientSession(
        base_url=live.url, timeout=aiohttp.ClientTimeout(total=120)
    ) as session:
        yield session


@pytest.fixture
def user(live: LiveCore) -> Client:
    """A fresh non-admin client with the three ordinary scopes."""
    return live.client(*USER_SCOPES)


@pytest.fixture
def admin(live: LiveCore) -> Client:
    return live.client("admin")


# -- helpers ---------------------------------------------------------------------------------
def body(**fields: Any) -> dict[str, Any]:
    """A create body for the demo model with a short deterministic generation."""
    return {"model": MODEL, "input": "Say hello.", **SHORT, **fields}


def assert_error(payload: Any, code: str | None = None, param: Any = ...) -> dict[str, Any]:
    """The LMSP error body: exactly type, code, message, param (and maybe extras); no trace."""
    assert isinstance(payload, dict) and set(payload) == {"error"}, payload
    error = payload["error"]
    assert {"type", "code", "message", "param"} <= set(error), error
    assert isinstance(error["type"], str) and error["type"]
    assert isinstance(error["code"], str) and error["code"]
    assert isinstance(error["message"], str) and error["message"]
    assert "Traceback" not in json.dumps(payload)
    if code is not None:
        assert error["code"] == code, error
    if param is not ...:
        assert error["param"] == param, error
    return error  # type: ignore[no-any-return]


async def expect_error(
    response: aiohttp.ClientResponse, status: int, code: str | None = None, param: Any = ...
) -> dict[str, Any]:
    text = await response.text()
    assert response.status == status, (response.status, text)
    assert response.content_type == "application/json", response.content_type
    return assert_error(json.loads(text), code, param)


@dataclass
class SseEvent:
    id: str
    event: str
    data: dict[str, Any]


def parse_sse(raw: bytes) -> list[SseEvent]:
    """Parse a whole SSE body strictly: LF only, each event exactly `id:`, `event:`, one
    `data:` line and a blank line; the data's type and sequence number match the fields."""
    assert b"\r" not in raw, "SSE must use LF line endings only"
    text = raw.decode("utf-8")
    if not text:
        return []
    assert text.endswith("\n\n"), text[-200:]
    events = []
    for block in text[:-2].split("\n\n"):
        lines = block.split("\n")
        assert len(lines) == 3, block
        assert lines[0].startswith("id: ") and lines[1].startswith("event: "), block
        assert lines[2].startswith("data: "), block
        data = json.loads(lines[2][len("data: ") :])
        event = SseEvent(lines[0][4:], lines[1][7:], data)
        assert event.event == data["type"], block
        assert event.id == str(data["sequence_number"]), block
        events.append(event)
    return events


async def read_sse_until(
    response: aiohttp.ClientResponse, stop: Any, limit: int = 10_000
) -> list[SseEvent]:
    """Read events one by one as they arrive until `stop(event)` is true (then stop reading)."""
    events: list[SseEvent] = []
    buffer = b""
    while len(events) < limit:
        chunk = await response.content.readuntil(b"\n\n")
        if not chunk:
            break
        buffer += chunk
        if not buffer.endswith(b"\n\n"):
            continue
        parsed = parse_sse(buffer)
        buffer = b""
        events.extend(parsed)
        if any(stop(e) for e in parsed):
            break
    return events


async def wait_state(
    http: aiohttp.ClientSession,
    headers: dict[str, str],
    task_id: str,
    states: tuple[str, ...],
    within: float = 90.0,
) -> dict[str, Any]:
    """Poll the task until it is in one of `states`."""
    seen: list[str] = []

    async def in_state() -> dict[str, Any] | None:
        async with http.get(f"/v1/tasks/{task_id}", headers=headers) as r:
            task: dict[str, Any] = await r.json()
            assert r.status == 200, task
        seen.append(task["state"])
        return task if task["state"] in states else None

    return await until(
        in_state, limit=within, interval=0.05, what=lambda: f"task {task_id} stuck in {seen[-1:]}"
    )


async def events_of(
    http: aiohttp.ClientSession, headers: dict[str, str], task_id: str
) -> list[dict[str, Any]]:
    """The whole event log of a task via the JSON pages."""
    out: list[dict[str, Any]] = []
    after = 0
    while True:
        async with http.get(
            f"/v1/tasks/{task_id}/events", params={"after": after, "limit": 1000}, headers=headers
        ) as r:
            page = await r.json()
            assert r.status == 200, page
        out.extend(page["data"])
        if not page["has_more"]:
            return out
        after = out[-1]["sequence_number"]


async def create_background(
    http: aiohttp.ClientSession, headers: dict[str, str], **fields: Any
) -> dict[str, Any]:
    async with http.post(
        "/v1/responses", json=body(background=True, **fields), headers=headers
    ) as r:
        answer: dict[str, Any] = await r.json()
        assert r.status == 202, answer
    return answer


async def occupy_model(http: aiohttp.ClientSession, headers: dict[str, str]) -> dict[str, Any]:
    """Start a long background generation and wait until it runs, so that new tasks for
    the model stay queued behind it. Cancel it when done."""
    blocker = await create_background(http, headers, **LONG)
    await wait_state(http, headers, blocker["id"], ("running",))
    return blocker


async def cancel(http: aiohttp.ClientSession, headers: dict[str, str], task_id: str) -> None:
    async with http.post(f"/v1/responses/{task_id}/cancel", headers=headers) as r:
        assert r.status in (200, 409), await r.text()


def task_object_of(live: LiveCore, token: str, task_id: str) -> dict[str, Any]:
    """GET /v1/tasks/{id} of the live service, which must answer 200."""
    status, body = call(f"{live.url}/v1/tasks/{task_id}", token)
    assert status == 200, body
    return body  # type: ignore[no-any-return]


def cli_beside(live: LiveCore, *args: str) -> Any:
    """`lmsp-desktop ARGS` on the live service's data directory, as a user runs it beside the
    service: without LMSP_TOKEN, so the command makes its own admin token."""
    env_token = os.environ.pop("LMSP_TOKEN", None)
    try:
        return lmsp(*args, data_dir=live.data_dir)
    finally:
        if env_token is not None:
            os.environ["LMSP_TOKEN"] = env_token
