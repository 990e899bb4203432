"""Ollama's `truncate` as Ollama's server does it, through a real `serve --max-context 512`,
the demo model and the `ollama` Python client: `/api/generate` keeps the end of a prompt too
long for the context (it answered 400), and `/api/chat` leaves out the oldest single
messages (it dropped whole turns), never a system message, the last message, nor a tool
result without the call it answers. `truncate: false` answers 400."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import ollama
import pytest

from tests.integration.serve_process import ServeProcess, call, create_token
from tests.integration.service_fixtures import MODEL, USER_SCOPES

CONTEXT = 512
QUESTION = "Question: which animal sat on the mat?"
# ~1,500 tokens, then the question: only its end fits the context.
LONG_PROMPT = " ".join(f"The cat number {n} sat on the mat." for n in range(150)) + QUESTION
GREEDY = {"temperature": 0, "num_predict": 8}


class Served:
    def __init__(self, data_dir: Path, server: ServeProcess) -> None:
        self.data_dir = data_dir
        self.server = server
        self.url = server.url

    def refused(self, token: str, path: str, body: dict[str, Any]) -> httpx.Response:
        """The body with `truncate: false` (which the ollama client cannot send)."""
        headers = {"Authorization": f"Bearer {token}"}
        body = {"model": MODEL, "stream": False, "options": GREEDY, **body, "truncate": False}
        return httpx.post(f"{self.url}{path}", json=body, headers=headers, timeout=300)

    def client(self) -> tuple[ollama.Client, str]:
        """An ollama client with a token of its own (a client sees only its own tasks)."""
        token = create_token(self.data_dir, ",".join(USER_SCOPES), name="truncate")
        headers = {"Authorization": f"Bearer {token}"}
        return ollama.Client(host=self.url, headers=headers, timeout=300), token

    def only_task(self, token: str) -> dict[str, Any]:
        """The one task this token made: its object (notes) and its request as stored (what
        the model was given), read as another reader of the store would."""
        status, listed = call(f"{self.url}/v1/tasks", token)
        assert status == 200, listed
        [listed_task] = listed["data"]
        status, task = call(f"{self.url}/v1/tasks/{listed_task['id']}", token)
        assert status == 200, task
        db = sqlite3.connect(f"file:{self.data_dir / 'lmsp.db'}?mode=ro", uri=True)
        try:
            query = "SELECT request FROM responses WHERE id = ?"
            [raw] = db.execute(query, (task["id"],)).fetchone()
        finally:
            db.close()
        return {**task, "request": json.loads(raw)}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    data_dir = tmp_path_factory.mktemp("truncate") / "data"
    create_token(data_dir, "admin")  # the store exists before serve opens it
    server = ServeProcess(data_dir, "--max-context", str(CONTEXT))
    server.start()
    try:
        yield Served(data_dir, server)
    finally:
        server.terminate()


@pytest.fixture
def client(served: Served) -> Iterator[tuple[ollama.Client, str]]:
    made, token = served.client()
    with made:
        yield made, token


def test_generate_keeps_the_end_of_a_prompt_too_long(
    served: Served, client: tuple[ollama.Client, str]
) -> None:
    client, token = client
    refused = served.refused(token, "/api/generate", {"prompt": LONG_PROMPT})
    assert refused.status_code == 400, refused.text
    assert f"maximum context length is {CONTEXT}" in refused.json()["error"]
    answer = client.generate(MODEL, LONG_PROMPT, options=GREEDY)  # it was a 400
    assert answer.done and answer.eval_count and answer.eval_count > 0
    # What was read: the context less the answer's room (num_predict 8), nearly all of it.
    assert CONTEXT - 8 - 40 <= (answer.prompt_eval_count or 0) <= CONTEXT - 8
    task = served.only_task(token)
    [seen] = task["request"]["messages"]
    assert seen["role"] == "user" and seen["content"].endswith(QUESTION)
    assert LONG_PROMPT.endswith(seen["content"]) and len(seen["content"]) < len(LONG_PROMPT) / 2
    cut = len(LONG_PROMPT) - len(seen["content"])
    assert any(f"the first {cut} characters of its last message cut" in n for n in task["notes"])


def words(label: str, n: int) -> str:
    return f"{label}: " + "word " * n


def test_chat_leaves_out_single_messages_not_whole_turns(
    served: Served, client: tuple[ollama.Client, str]
) -> None:
    client, token = client
    system = {"role": "system", "content": "You answer in one word."}
    messages = [
        system,
        {"role": "user", "content": words("First question", 250)},
        {"role": "assistant", "content": words("First answer", 120)},
        {"role": "user", "content": words("Second question", 120)},
        {"role": "assistant", "content": "Fine."},
        {"role": "user", "content": "What is the capital of France?"},
    ]
    refused = served.refused(token, "/api/chat", {"messages": messages})
    assert refused.status_code == 400, refused.text
    answer = client.chat(MODEL, messages, options=GREEDY)
    assert answer.done and (answer.prompt_eval_count or 0) <= CONTEXT - 8
    seen = served.only_task(token)["request"]["messages"]
    # Only the oldest message went, as in Ollama: its answer stays (whole turns dropped the
    # first answer with it).
    assert [m["content"] for m in seen] == [m["content"] for m in [system, *messages[2:]]]


def test_chat_never_keeps_a_tool_result_without_its_call(
    served: Served, client: tuple[ollama.Client, str]
) -> None:
    client, token = client
    system = {"role": "system", "content": "You answer in one word."}
    call_message = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"function": {"name": "lookup", "arguments": {"about": LONG_PROMPT}}}],
    }
    messages = [
        system,
        {"role": "user", "content": words("Tell me about Paris", 100)},
        call_message,
        {"role": "tool", "content": "Paris is the capital of France.", "tool_name": "lookup"},
        {"role": "user", "content": "What is the capital of France?"},
    ]
    answer = client.chat(MODEL, messages, options=GREEDY)
    assert answer.done
    seen = served.only_task(token)["request"]["messages"]
    # Without its call the tool result would answer nothing: both go, as in Ollama.
    assert [m["role"] for m in seen] == ["system", "user"]
    assert seen[-1]["content"] == "What is the capital of France?"


def test_a_long_last_chat_message_keeps_its_end(
    served: Served, client: tuple[ollama.Client, str]
) -> None:
    client, token = client
    system = {"role": "system", "content": "You answer in one word."}
    messages = [
        system,
        {"role": "user", "content": "Hello."},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": LONG_PROMPT},
    ]
    answer = client.chat(MODEL, messages, options=GREEDY)
    assert answer.done and (answer.prompt_eval_count or 0) <= CONTEXT - 8
    seen = served.only_task(token)["request"]["messages"]
    assert seen[0] == system and len(seen) == 2
    assert seen[1]["content"].endswith(QUESTION) and LONG_PROMPT.endswith(seen[1]["content"])


def test_a_last_message_that_fits_is_never_cut_for_the_answers_room(
    served: Served, client: tuple[ollama.Client, str]
) -> None:
    client, token = client
    system = {"role": "system", "content": "You answer in one word."}
    last = {"role": "user", "content": words("Count the words", 380)}
    messages = [system, {"role": "user", "content": words("Old question", 200)}, last]
    # Room for 200 tokens of answer is more than the last message leaves; it is read whole
    # all the same (the answer stops at the context's end), only the old message going.
    answer = client.chat(MODEL, messages, options={"temperature": 0, "num_predict": 200})
    assert answer.done
    seen = served.only_task(token)["request"]["messages"]
    assert seen == [system, last]
