"""A stream open when the service stops ends with its API's own error ending, meaning
`shutting_down` (what a sync request gets as a 503 then), never as a clean end that a client
would take for a finished answer; its task is left unfinished in the store, for recovery to
apply its on_restart policy at the next start (LMSP chapter 11).

A served Core with the fake engine (tokens slow enough to be mid-stream at the stop), stopped
as the app and `serve` stop it (Core.stop), read by the real clients (openai, anthropic,
ollama) and over raw HTTP (every API's create and the two replay routes); and a real `serve`
process with the demo model, stopped by SIGINT under the openai SDK's stream helper (the
reviewer's steps).
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import ollama
import openai
import pytest
from openai import OpenAI

from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.core.states import ENDING_EVENTS
from lmsp_desktop.core.storage.store import Store
from tests.integration.serve_process import ServeProcess, create_token
from tests.integration.service_fixtures import (
    LONG,
    MODEL,
    USER_SCOPES,
    LiveCore,
    auth,
    create_background,
    parse_sse,
)

WORD = "lorem"  # the fake model's only token: in a stream, a sure sign of generated text
PROMPT = "Tell a long story."
MESSAGES = [{"role": "user", "content": PROMPT}]


@pytest.fixture
def stopping_live(tmp_path: Path) -> Iterator[LiveCore]:
    """A served Core whose fake model says " lorem" every 50 ms (400 of them take 20 s); each
    test stops it."""
    live = LiveCore(tmp_path / "data", engine=FakeEngine([f" {WORD}"] * 1000, token_delay=0.05))
    try:
        yield live
    finally:
        live.stop()


def left_in_store(data_dir: Path) -> dict[str, tuple[str, list[str]]]:
    """Every task in the stopped service's store: its state and its events' types (read as
    they were left: opening the store runs no recovery)."""

    async def read() -> dict[str, tuple[str, list[str]]]:
        store = Store(data_dir)
        await store.open()
        try:
            rows = await store.db.fetchall("SELECT id, state FROM tasks")
            return {
                row["id"]: (row["state"], [e["type"] for e in await store.tasks.events(row["id"])])
                for row in rows
            }
        finally:
            await store.close()

    with ThreadPoolExecutor(1) as thread:
        return thread.submit(asyncio.run, read()).result()


def assert_left_running(data_dir: Path, count: int) -> dict[str, tuple[str, list[str]]]:
    """The stop wrote nothing for the streams' tasks: each is still running, no ending event
    (recovery decides at the next start)."""
    tasks = left_in_store(data_dir)
    assert len(tasks) == count, tasks
    for task_id, (state, types) in tasks.items():
        assert state == "running", (task_id, state, types[-3:])
        assert not set(types) & ENDING_EVENTS, (task_id, types)
    return tasks


def assert_stopping_message(message: str, task_id: str | None = None) -> None:
    assert "The service is stopping" in message and "left unfinished" in message, message
    assert "on_restart policy (fail)" in message and "retrieved by its id" in message, message
    if task_id is not None:
        assert f"{task_id} was left unfinished" in message, message


# -- the real clients ------------------------------------------------------------------------
def test_the_openai_sdk_responses_stream_raises_shutting_down(stopping_live: LiveCore) -> None:
    live = stopping_live
    client = OpenAI(
        base_url=live.url + "/v1", api_key=live.token(*USER_SCOPES), max_retries=0, timeout=60
    )
    events: list[Any] = []
    with client, pytest.raises(openai.APIError) as raised:
        stream = client.responses.create(
            model=MODEL, input=PROMPT, max_output_tokens=400, stream=True
        )
        for event in stream:
            events.append(event)
            if event.type == "response.output_text.delta":
                live.stop_started()
    live.stop_started().result(60)
    error = raised.value
    task_id = events[0].response.id
    assert type(error) is openai.APIError and error.code == "shutting_down", error
    assert error.type == "server_error"
    assert_stopping_message(error.message, task_id)
    assert events[-1].type == "response.output_text.delta"  # mid-text: then the error
    assert list(assert_left_running(live.data_dir, 1)) == [task_id]


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_the_openai_sdk_chat_and_completions_streams_raise_shutting_down(
    stopping_live: LiveCore, api: str
) -> None:
    live = stopping_live
    client = OpenAI(
        base_url=live.url + "/v1", api_key=live.token(*USER_SCOPES), max_retries=0, timeout=60
    )
    chunks: list[Any] = []
    with client, pytest.raises(openai.APIError) as raised:
        stream: Any
        if api == "chat":
            stream = client.chat.completions.create(
                model=MODEL, messages=MESSAGES, max_tokens=400, stream=True
            )
        else:
            stream = client.completions.create(
                model=MODEL, prompt=PROMPT, max_tokens=400, stream=True
            )
        for chunk in stream:
            chunks.append(chunk)
            if len(chunks) == 3:
                live.stop_started()
    live.stop_started().result(60)
    error = raised.value
    assert type(error) is openai.APIError and error.code == "shutting_down", error
    assert_stopping_message(error.message, chunks[0].id)
    assert list(assert_left_running(live.data_dir, 1)) == [chunks[0].id]


def test_the_anthropic_sdk_stream_raises_an_overloaded_error(stopping_live: LiveCore) -> None:
    live = stopping_live
    client = anthropic.Anthropic(
        base_url=live.url, api_key=live.token(*USER_SCOPES), max_retries=0, timeout=60
    )
    events: list[Any] = []
    with client, pytest.raises(anthropic.APIStatusError) as raised:
        stream = client.messages.create(model=MODEL, max_tokens=400, messages=MESSAGES, stream=True)
        for event in stream:
            events.append(event)
            if event.type == "content_block_delta":
                live.stop_started()
    live.stop_started().result(60)
    body = raised.value.body
    task_id = events[0].message.id
    assert isinstance(body, dict) and body["type"] == "error", body
    assert body["error"]["type"] == "overloaded_error", body
    assert body["error"]["code"] == "shutting_down", body
    assert_stopping_message(body["error"]["message"], task_id)
    assert events[-1].type == "content_block_delta"
    assert list(assert_left_running(live.data_dir, 1)) == [task_id]


def test_the_ollama_client_stream_raises_with_the_stopping_message(
    stopping_live: LiveCore,
) -> None:
    live = stopping_live
    client = ollama.Client(host=live.url, headers=auth(live.token(*USER_SCOPES)), timeout=60)
    parts: list[Any] = []
    with pytest.raises(ollama.ResponseError) as raised:
        for part in client.chat(MODEL, MESSAGES, stream=True, options={"num_predict": 400}):
            parts.append(part)
            live.stop_started()
    client._client.close()
    live.stop_started().result(60)
    assert_stopping_message(raised.value.error)
    assert parts and not parts[-1].done
    assert_left_running(live.data_dir, 1)


# -- every API's stream, raw: the last bytes sent ---------------------------------------------
CREATES: dict[str, tuple[str, dict[str, Any]]] = {
    "responses": ("/v1/responses", {"input": PROMPT, "max_output_tokens": 400}),
    "chat": ("/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 400}),
    "completions": ("/v1/completions", {"prompt": PROMPT, "max_tokens": 400}),
    "anthropic": ("/v1/messages", {"messages": MESSAGES, "max_tokens": 400}),
    "ollama chat": ("/api/chat", {"messages": MESSAGES, "options": {"num_predict": 400}}),
    "ollama generate": ("/api/generate", {"prompt": PROMPT, "options": {"num_predict": 400}}),
}
# The routes that replay and follow a task's events: a background response's here.
REPLAYS = {
    "responses replay": ("/v1/responses/{id}", {"stream": "true"}, {}),
    "task events": ("/v1/tasks/{id}/events", {}, {"Accept": "text/event-stream"}),
}


async def read_until_text(response: aiohttp.ClientResponse) -> bytes:
    """The stream's bytes until generated text has come (then stop reading)."""
    assert response.status == 200, await response.text()
    head = b""
    while WORD.encode() not in head:
        chunk = await response.content.readany()
        assert chunk, head
        head += chunk
    return head


def data_lines(raw: bytes) -> list[Any]:
    """Chat Completions' and completions' `data:` lines (the JSON of each, or "[DONE]")."""
    blocks = raw.decode().split("\n\n")
    assert blocks[-1] == "", raw[-200:]
    out = []
    for block in blocks[:-1]:
        assert block.startswith("data: "), block
        text = block[len("data: ") :]
        out.append(text if text == "[DONE]" else json.loads(text))
    return out


def anthropic_events(raw: bytes) -> list[tuple[str, dict[str, Any]]]:
    blocks = raw.decode().split("\n\n")
    assert blocks[-1] == "", raw[-200:]
    out = []
    for block in blocks[:-1]:
        event, data = block.split("\n")
        assert event.startswith("event: ") and data.startswith("data: "), block
        out.append((event[len("event: ") :], json.loads(data[len("data: ") :])))
    return out


def ends_with_shutting_down(raw: bytes) -> str:
    """A Responses or tasks stream (strict SSE): the standard `error` event last, after text,
    numbered as the last event sent (it is not in the task's log); returns the task id."""
    *sent, last = parse_sse(raw)
    assert any(e.event == "response.output_text.delta" for e in sent)
    assert all(e.event != "error" for e in sent)
    assert last.event == "error" and last.id == sent[-1].id, last
    error = last.data["error"]
    assert set(error) == {"type", "code", "message", "param"}, error
    assert (error["type"], error["code"], error["param"]) == ("server_error", "shutting_down", None)
    task_id = str(sent[0].data["response"]["id"])
    assert_stopping_message(error["message"], task_id)
    return task_id


def chunks_end_with_shutting_down(raw: bytes) -> str:
    """Chat Completions or completions: the error chunk last, no `[DONE]`."""
    *chunks, last = data_lines(raw)
    assert "[DONE]" not in chunks and all("error" not in c for c in chunks)
    assert set(last) == {"error"}, last
    error = last["error"]
    assert (error["type"], error["code"]) == ("server_error", "shutting_down"), error
    assert_stopping_message(error["message"], chunks[0]["id"])
    return str(chunks[0]["id"])


def anthropic_ends_with_overloaded(raw: bytes) -> str:
    *shown, (kind, data) = anthropic_events(raw)
    assert [k for k, _ in shown][:2] == ["message_start", "ping"]
    assert shown[-1][0] == "content_block_delta" and kind == "error", shown[-3:]
    assert data["type"] == "error" and data["error"]["type"] == "overloaded_error", data
    assert data["error"]["code"] == "shutting_down"
    task_id = str(shown[0][1]["message"]["id"])
    assert_stopping_message(data["error"]["message"], task_id)
    return task_id


def ndjson_ends_with_error(raw: bytes) -> None:
    *lines, last = [json.loads(line) for line in raw.decode().splitlines()]
    assert lines and all(not line["done"] and "error" not in line for line in lines)
    assert set(last) == {"error"}, last
    assert_stopping_message(last["error"])


ENDINGS = {
    "responses": ends_with_shutting_down,
    "chat": chunks_end_with_shutting_down,
    "completions": chunks_end_with_shutting_down,
    "anthropic": anthropic_ends_with_overloaded,
    "ollama chat": ndjson_ends_with_error,
    "ollama generate": ndjson_ends_with_error,
    "responses replay": ends_with_shutting_down,
    "task events": ends_with_shutting_down,  # LMSP's own events too, then the same ending
}


@pytest.mark.parametrize("stream", list(ENDINGS))
async def test_the_stream_ends_with_its_apis_error_ending_at_the_stop(
    stopping_live: LiveCore, stream: str
) -> None:
    """A stream with text flowing; the stop (Core.stop, as the app's Quit and serve's signals
    call it) ends it with its API's error ending, the last thing sent."""
    live = stopping_live
    headers = auth(live.token(*USER_SCOPES))
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(base_url=live.url, timeout=timeout) as http:
        background = None
        if stream in CREATES:
            path, fields = CREATES[stream]
            body = {"model": MODEL, "stream": True, **fields}
            response = await http.post(path, json=body, headers=headers)
        else:
            background = await create_background(http, headers, input=PROMPT, max_output_tokens=400)
            path, query, extra = REPLAYS[stream]
            path = path.format(id=background["id"])
            response = await http.get(path, params=query, headers={**headers, **extra})
        head = await read_until_text(response)
        stopping = live.begin_stop()
        raw = head + await response.content.read()
        response.release()
        await stopping

    task_id = ENDINGS[stream](raw)
    tasks = assert_left_running(live.data_dir, 1)
    if background is not None:
        assert task_id == background["id"]
    if task_id is not None:
        assert list(tasks) == [task_id]


# -- a real serve, SIGINT -------------------------------------------------------------------
def test_sigint_to_serve_ends_the_openai_sdk_stream_with_shutting_down(tmp_path: Path) -> None:
    """`serve` with the demo model; Ctrl-C (SIGINT) while the SDK's stream helper reads a
    long answer: the helper raises APIError shutting_down, serve exits 0, and the task is left
    running for the next start to recover."""
    data_dir = tmp_path / "data"
    token = create_token(data_dir, ",".join(USER_SCOPES))
    server = ServeProcess(data_dir)
    client = OpenAI(base_url=server.start() + "/v1", api_key=token, max_retries=0, timeout=120)
    assert server.proc is not None
    task_id = ""
    deltas = 0
    try:
        with (
            client,
            pytest.raises(openai.APIError) as raised,
            client.responses.stream(model=MODEL, **LONG) as stream,
        ):
            for event in stream:
                if event.type == "response.created":
                    task_id = event.response.id
                if event.type == "response.output_text.delta":
                    deltas += 1
                    if deltas == 1:
                        server.proc.send_signal(signal.SIGINT)
        assert server.exit_code(30) == 0, server.stderr()[-2000:]
    finally:
        if server.proc.poll() is None:
            server.kill()
    error = raised.value
    assert type(error) is openai.APIError and error.code == "shutting_down", error
    assert_stopping_message(error.message, task_id)
    assert deltas < 400
    assert list(assert_left_running(data_dir, 1)) == [task_id]
