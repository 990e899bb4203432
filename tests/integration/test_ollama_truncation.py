"""Ollama's truncation, against a real service (Max context 512) and the demo model: an
`/api/embed` input longer than the context is cut to fit (`truncate` defaults to true; false
answers 400), and an `/api/chat` conversation longer than the context loses its oldest turns,
never its system message nor its last turn (`truncate: false`: 400), as Ollama's do."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.integration.serve_process import call
from tests.integration.service_fixtures import MODEL, USER_SCOPES, LiveCore

CONTEXT = 512
LONG_TEXT = " ".join(f"The cat number {n} sat on the mat." for n in range(150))  # ~1,500 tokens


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveCore]:
    running = LiveCore(tmp_path_factory.mktemp("small-context"))
    running.core.apply_settings(dataclasses.replace(running.core.settings, max_context=CONTEXT))
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def token(small: LiveCore) -> str:
    return small.token(*USER_SCOPES)


def post(live: LiveCore, token: str, path: str, body: dict[str, Any]) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=live.url, headers=headers, timeout=300) as client:
        return client.post(path, json=body)


def only_task(live: LiveCore, token: str) -> dict[str, Any]:
    status, listed = call(f"{live.url}/v1/tasks", token)
    assert status == 200, listed
    [task] = listed["data"]
    return dict(task)


def stored_request(live: LiveCore, task_id: str) -> dict[str, Any]:
    """The request as stored with the task (what the model was given), read as another
    reader of the store would."""
    db = sqlite3.connect(f"file:{live.data_dir / 'lmsp.db'}?mode=ro", uri=True)
    try:
        [raw] = db.execute("SELECT request FROM responses WHERE id = ?", (task_id,)).fetchone()
    finally:
        db.close()
    return dict(json.loads(raw))


def test_embed_cuts_a_long_input_to_the_context(small: LiveCore, token: str) -> None:
    refused = post(
        small, token, "/api/embed", {"model": MODEL, "input": LONG_TEXT, "truncate": False}
    )
    assert refused.status_code == 400, refused.text
    assert f"maximum context length is {CONTEXT}" in refused.json()["error"]
    answer = post(small, token, "/api/embed", {"model": MODEL, "input": ["Hello.", LONG_TEXT]})
    assert answer.status_code == 200, answer.text  # it was a 400
    body = answer.json()
    assert len(body["embeddings"]) == 2 and all(len(v) == 576 for v in body["embeddings"])
    # The long input's longest beginning that fits was embedded, and the task says so.
    short = post(small, token, "/api/embed", {"model": MODEL, "input": "Hello."}).json()
    cut = body["prompt_eval_count"] - short["prompt_eval_count"]
    assert CONTEXT - 16 <= cut <= CONTEXT
    status, listed = call(f"{small.url}/v1/tasks", token)
    assert status == 200, listed
    notes = [
        note
        for task in listed["data"]  # a list leaves the notes out: each task's own
        for note in call(f"{small.url}/v1/tasks/{task['id']}", token)[1]["notes"]
    ]
    assert any("Input 1" in n and f"cut to its first {cut} tokens" in n for n in notes), notes


def turns(n: int) -> list[dict[str, str]]:
    """`n` earlier exchanges of about 100 tokens each."""
    out = []
    for i in range(n):
        out.append({"role": "user", "content": f"Story {i}: " + "a long story " * 30})
        out.append({"role": "assistant", "content": f"Noted story {i}: " + "yes " * 30})
    return out


def test_chat_drops_the_oldest_turns_to_fit(small: LiveCore, token: str) -> None:
    system = {"role": "system", "content": "You answer in one word."}
    last = {"role": "user", "content": "What is the capital of France?"}
    messages = [system, *turns(6), last]
    asked: dict[str, Any] = {
        "model": MODEL,
        "messages": messages,
        "stream": False,
        "options": {"temperature": 0, "num_predict": 4},
    }
    refused = post(small, token, "/api/chat", {**asked, "truncate": False})
    assert refused.status_code == 400, refused.text
    assert f"maximum context length is {CONTEXT}" in refused.json()["error"]
    answer = post(small, token, "/api/chat", asked)
    assert answer.status_code == 200, answer.text  # it was a 400
    body = answer.json()
    assert body["done"] and body["prompt_eval_count"] < CONTEXT
    [task] = [t for t in call(f"{small.url}/v1/tasks", token)[1]["data"]]
    seen = stored_request(small, task["id"])["messages"]
    # The model saw the system message, the newest turns whole and the question; the
    # oldest turns were dropped.
    assert seen[0] == system and seen[-1] == last
    assert seen[1:-1] == messages[len(messages) - len(seen) + 1 : -1]
    assert 1 < len(seen) < len(messages)
