"""Ollama's timing fields when the answer is a tool call, against the real service and demo
model: `prompt_eval_duration` ends at the first output token and `eval_duration` covers the
generation, as the task's own record of its first token and its end says (the call's event
comes only once the call is parsed, tokens after the first)."""

from __future__ import annotations

import sqlite3
from typing import Any

from ollama import Client

from tests.integration.serve_process import call
from tests.integration.service_fixtures import MODEL, USER_SCOPES, LiveCore

pytest_plugins = ["tests.integration.service_fixtures"]

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
# The clocks of the route and of the runner are read a few microseconds apart.
SLACK_S = 0.002


def task_times(live: LiveCore, task_id: str) -> tuple[float, float, float]:
    """When the task's first output token came, when it started and ended (the runner's
    record, in epoch seconds), read from the store as another reader would."""
    db = sqlite3.connect(f"file:{live.data_dir / 'lmsp.db'}?mode=ro", uri=True)
    try:
        row = db.execute(
            "SELECT first_token_at, started_at, finished_at FROM tasks WHERE id = ?", (task_id,)
        ).fetchone()
    finally:
        db.close()
    return float(row[0]), float(row[1]), float(row[2])


def test_a_tool_call_answer_times_its_generation(live: LiveCore) -> None:
    token = live.token(*USER_SCOPES)
    client = Client(host=live.url, headers={"Authorization": f"Bearer {token}"}, timeout=300)
    try:
        answer = client._client.post(
            "/api/chat",
            json={
                "model": MODEL,
                "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
                "tools": [WEATHER],
                "tool_choice": "required",
                "stream": False,
                "options": {"temperature": 0, "num_predict": 60},
            },
        )
    finally:
        client._client.close()
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    [called] = body["message"]["tool_calls"]
    assert called["function"]["name"] == "get_weather"
    # The task this client made (a client sees only its own), and the runner's record of it.
    status, listed = call(f"{live.url}/v1/tasks", token)
    assert status == 200, listed
    [task] = listed["data"]
    first, started, finished = task_times(live, task["id"])
    assert started <= first < finished
    assert body["eval_count"] == task["output_tokens"] > 5
    # The generation, from its first token to its end, is in eval_duration (it was the time
    # between the call's last event and the answer: 1.4 ms for 31 tokens); the prompt's
    # duration ends at the first token (it held the whole generation).
    assert body["eval_duration"] / 1e9 >= finished - first - SLACK_S
    assert body["prompt_eval_duration"] / 1e9 <= first - started + SLACK_S
    parts = ("load_duration", "prompt_eval_duration", "eval_duration")
    assert sum(body[k] for k in parts) <= body["total_duration"] + SLACK_S * 1e9
