"""The Anthropic Messages API with the official `anthropic` SDK, unchanged, against a real
`serve` process and the demo model: plain, stream, a tool round trip, count_tokens; and over
raw HTTP what the SDK hides: errors in Anthropic's shape, x-api-key, `?beta=true`, notes
for unused fields, each message a task (listed, idempotent, cancelled when its stream's
client goes away)."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anthropic
import jsonschema
import pytest

from tests.integration.serve_process import ServeProcess, call, create_token
from tests.support.cut_model import NAME as CUT_MODEL
from tests.support.cut_model import cut_demo_model
from tests.support.polling import until_sync

MODEL = "smollm2-135m-instruct"
FRANCE = "What is the capital of France? One word."
# The SDK no longer takes sampling settings as arguments; the API still does.
GREEDY = {"extra_body": {"temperature": 0}}
WEATHER = {
    "name": "get_weather",
    "description": "Current weather in a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


@dataclass
class Served:
    url: str
    token: str

    def post(self, path: str, body: Any, headers: dict[str, str] | None = None) -> tuple[int, Any]:
        return call(self.url + path, self.token, "POST", body, headers)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    data_dir: Path = tmp_path_factory.mktemp("anthropic") / "data"
    token = create_token(data_dir, "models:read,responses:read,responses:write")
    # Beside the demo model, the demo cut to 4 blocks (Claude Code's long request below).
    server = ServeProcess(data_dir, "--models-dir", str(cut_demo_model().parent))
    url = server.start()
    try:
        yield Served(url, token)
    finally:
        if server.proc is not None and server.proc.poll() is None:
            server.terminate()


@pytest.fixture
def sdk(served: Served) -> Iterator[anthropic.Anthropic]:
    # The base URL is the service root, as Claude Code's ANTHROPIC_BASE_URL.
    client = anthropic.Anthropic(
        base_url=served.url, api_key=served.token, max_retries=0, timeout=300
    )
    try:
        yield client
    finally:
        client.close()


def task_of(served: Served, task_id: str) -> dict[str, Any]:
    status, task = call(f"{served.url}/v1/tasks/{task_id}", served.token)
    assert status == 200, task
    return dict(task)


def test_create_a_message(sdk: anthropic.Anthropic, served: Served) -> None:
    message = sdk.messages.create(
        model=MODEL,
        max_tokens=24,
        system="Answer briefly.",
        messages=[{"role": "user", "content": FRANCE}],
        **GREEDY,  # type: ignore[arg-type]
    )
    assert message.id.startswith("msg_") and message.role == "assistant"
    assert message.stop_reason == "end_turn"
    text = "".join(b.text for b in message.content if b.type == "text")
    assert "Paris" in text
    assert message.usage.output_tokens >= 1
    assert message.usage.input_tokens + (message.usage.cache_read_input_tokens or 0) > 10
    task = task_of(served, message.id)  # every message is a task the app shows
    assert (task["state"], task["api"]) == ("completed", "anthropic.messages")


def test_the_sdks_model_list_and_retrieve(sdk: anthropic.Anthropic) -> None:
    """`client.models.list()` gets Anthropic's fields beside OpenAI's on the same route (a
    new user's walk found `type`, `display_name` and `created_at` all None)."""
    page = sdk.models.list()
    ids = [model.id for model in page.data]
    assert MODEL in ids and page.first_id == ids[0] and page.last_id == ids[-1]
    model = sdk.models.retrieve(MODEL)
    assert model.type == "model" and model.display_name
    assert model.created_at.year >= 2024 and model.created_at.utcoffset() is not None


def test_stream_a_message(sdk: anthropic.Anthropic) -> None:
    with sdk.messages.stream(
        model=MODEL,
        max_tokens=24,
        messages=[{"role": "user", "content": FRANCE}],
        **GREEDY,  # type: ignore[arg-type]
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    text = "".join(b.text for b in final.content if b.type == "text")
    assert "Paris" in text and final.stop_reason == "end_turn"
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert "content_block_start" in kinds and "content_block_stop" in kinds
    assert final.usage.output_tokens >= 1
    plain = sdk.messages.create(
        model=MODEL,
        max_tokens=24,
        messages=[{"role": "user", "content": FRANCE}],
        **GREEDY,  # type: ignore[arg-type]
    )
    assert plain.content[0].type == "text" and plain.content[0].text == text


def test_a_stop_sequence_ends_the_message_and_is_named(sdk: anthropic.Anthropic) -> None:
    """Anthropic's API: `stop_reason` "stop_sequence" with the matched string, in the body
    and in the stream's message_delta; the text stops before it."""
    asked: Any = {
        "model": MODEL,
        "max_tokens": 24,
        "messages": [{"role": "user", "content": FRANCE}],
        **GREEDY,
    }
    whole = sdk.messages.create(**asked)
    full = "".join(b.text for b in whole.content if b.type == "text")
    assert "Paris" in full and whole.stop_sequence is None
    stops = ["Zanzibar", "Paris"]  # the second is the one met
    message = sdk.messages.create(**asked, stop_sequences=stops)
    assert (message.stop_reason, message.stop_sequence) == ("stop_sequence", "Paris")
    text = "".join(b.text for b in message.content if b.type == "text")
    assert text == full[: full.index("Paris")]
    with sdk.messages.stream(**asked, stop_sequences=stops) as stream:
        deltas = [e for e in stream if e.type == "message_delta"]
        final = stream.get_final_message()
    assert [(d.delta.stop_reason, d.delta.stop_sequence) for d in deltas] == [
        ("stop_sequence", "Paris")
    ]
    assert (final.stop_reason, final.stop_sequence) == ("stop_sequence", "Paris")
    unmet = sdk.messages.create(**asked, stop_sequences=["Zanzibar"])
    assert (unmet.stop_reason, unmet.stop_sequence) == ("end_turn", None)


def test_a_tool_round_trip(sdk: anthropic.Anthropic) -> None:
    question = {"role": "user", "content": "What is the weather in Paris?"}
    first = sdk.messages.create(
        model=MODEL,
        max_tokens=60,
        tools=[WEATHER],  # type: ignore[list-item]
        tool_choice={"type": "tool", "name": "get_weather"},
        messages=[question],  # type: ignore[list-item]
        **GREEDY,  # type: ignore[arg-type]
    )
    assert first.stop_reason == "tool_use"
    uses = [b for b in first.content if b.type == "tool_use"]
    assert len(uses) == 1 and uses[0].name == "get_weather"
    assert isinstance(uses[0].input, dict)
    answer = sdk.messages.create(
        model=MODEL,
        max_tokens=30,
        tools=[WEATHER],  # type: ignore[list-item]
        messages=[
            question,  # type: ignore[list-item]
            {"role": "assistant", "content": first.content},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": uses[0].id, "content": "Sunny, 24 C"}
                ],
            },
        ],
        **GREEDY,  # type: ignore[arg-type]
    )
    assert answer.stop_reason in ("end_turn", "max_tokens")
    assert any(b.type == "text" and b.text for b in answer.content)


def test_a_forced_call_streams_as_input_json(sdk: anthropic.Anthropic) -> None:
    with sdk.messages.stream(
        model=MODEL,
        max_tokens=60,
        tools=[WEATHER],  # type: ignore[list-item]
        tool_choice={"type": "any"},
        messages=[{"role": "user", "content": "What is the weather in Paris?"}],
        **GREEDY,  # type: ignore[arg-type]
    ) as stream:
        deltas = [e.delta.type for e in stream if e.type == "content_block_delta"]
        final = stream.get_final_message()
    assert "input_json_delta" in deltas and final.stop_reason == "tool_use"
    use = next(b for b in final.content if b.type == "tool_use")
    assert use.name == "get_weather" and isinstance(use.input, dict)


def test_count_tokens(sdk: anthropic.Anthropic) -> None:
    messages: Any = [{"role": "user", "content": FRANCE}]
    alone = sdk.messages.count_tokens(model=MODEL, messages=messages).input_tokens
    with_tools = sdk.messages.count_tokens(
        model=MODEL,
        messages=messages,
        tools=[WEATHER],  # type: ignore[list-item]
    ).input_tokens
    assert 10 < alone < with_tools  # the tool listing is part of the prompt
    message = sdk.messages.create(
        model=MODEL,
        max_tokens=1,
        messages=messages,
        **GREEDY,  # type: ignore[arg-type]
    )
    used = message.usage.input_tokens + (message.usage.cache_read_input_tokens or 0)
    assert used == alone  # counted exactly as the run counts it


def test_errors_have_anthropics_shape(sdk: anthropic.Anthropic, served: Served) -> None:
    with pytest.raises(anthropic.NotFoundError) as missing:
        sdk.messages.create(
            model="no-such-model", max_tokens=4, messages=[{"role": "user", "content": "x"}]
        )
    assert missing.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
    status, body = call(
        served.url + "/v1/messages",
        "lmsp_not-a-token",
        "POST",
        {"model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": "x"}]},
    )
    assert status == 401 and body["type"] == "error"
    assert body["error"]["type"] == "authentication_error"
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": ""}}
    status, body = served.post(
        "/v1/messages",
        {"model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": [image]}]},
    )
    assert status == 400 and body["error"]["type"] == "invalid_request_error"
    assert "text only" in body["error"]["message"]
    status, body = served.post("/v1/messages", {"model": MODEL, "messages": []})
    assert status == 400 and body["type"] == "error"


def test_x_api_key_beta_query_and_notes(served: Served) -> None:
    """Claude Code's way: x-api-key (or a bearer token), `?beta=true`, anthropic-version and
    -beta headers, fields this service does not use and `thinking`: answered, and noted."""
    status, message = call(
        served.url + "/v1/messages?beta=true",
        "",
        "POST",
        {
            "model": MODEL,
            "max_tokens": 4,
            "messages": [{"role": "user", "content": "Hi"}],
            "thinking": {"type": "enabled", "budget_tokens": 1024},
            "context_management": {"edits": []},
            "top_k": 40,
        },
        {
            "Authorization": "",
            "x-api-key": served.token,
            "anthropic-version": "2023-06-01",
            "anthropic-beta": "interleaved-thinking-2025-05-14",
        },
    )
    assert status == 200, message
    notes = task_of(served, message["id"])["notes"]
    assert any("context_management" in n for n in notes)
    assert any("thinking" in n.lower() for n in notes)
    assert not any("top_k" in n for n in notes)  # applied by the sampler, so not noted


def test_idempotent_retry_gets_the_same_message(served: Served) -> None:
    body = {"model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}]}
    key = {"Idempotency-Key": "anthropic-retry-1"}
    first = served.post("/v1/messages", {**body, "temperature": 0}, key)
    again = served.post("/v1/messages", {**body, "temperature": 0}, key)
    assert first[0] == again[0] == 200
    assert first[1]["id"] == again[1]["id"] and first[1]["content"] == again[1]["content"]


def test_a_stream_whose_client_goes_away_cancels_its_task(served: Served) -> None:
    url = urlsplit(served.url)
    conn = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port, timeout=60)
    conn.request(
        "POST",
        "/v1/messages",
        json.dumps(
            {
                "model": MODEL,
                "max_tokens": 2000,
                "stream": True,
                "messages": [{"role": "user", "content": "Write a very long story."}],
            }
        ),
        {"x-api-key": served.token, "Content-Type": "application/json"},
    )
    answer = conn.getresponse()
    start = answer.readline() + answer.readline()  # event: message_start / data: {...}
    message_id = json.loads(start.split(b"data: ", 1)[1])["message"]["id"]
    while b"text_delta" not in answer.readline():
        pass  # generating
    conn.close()  # the client goes away mid-stream
    task = until_sync(
        lambda: (t := task_of(served, message_id))["state"] == "cancelled" and t,
        120,
        f"{message_id} cancelled",
    )
    assert task["output_tokens"] >= 1  # its partial output is kept


CLAUDE_CODE = Path(__file__).with_name("claude-code-request.json")


def test_claude_codes_request_replayed(served: Served) -> None:
    """The body Claude Code 2.1.328 posted for `claude -p "say hi"` (captured against serve),
    trimmed for a quicker prefill (about 2,500 tokens of its 12,279: system texts cut to 600
    characters, tool descriptions to 200, no descriptions inside the input schemas), with
    its shape kept: three system blocks with cache_control, a system turn after the user's,
    all 12 tools with their input schemas (Workflow's `maxLength: 524288` crashed the engine
    while its grammar was written out), thinking, metadata, context_management,
    output_config, its headers and `?beta=true`. Sent through the anthropic SDK's beta
    stream, as Claude Code sends it: the events make a message the SDK accepts, and a tool
    call names one of the tools with input that follows its schema (the grammar's doing,
    whatever the model). The claim is the request's shape, not the words: it runs on the
    demo model cut to 4 blocks (docs/development.md), whose prefill of the 2,668 tokens
    costs a fifth of the demo model's (the ANTHROPIC_MODEL Claude Code would be given)."""
    captured = json.loads(CLAUDE_CODE.read_text())
    assert captured["path"] == "/v1/messages?beta=true"  # what the beta client posts to
    body = {**captured["body"], "model": CUT_MODEL}
    assert body.pop("stream") is True
    headers = {k: v for k, v in captured["headers"].items() if k != "anthropic-beta"}
    betas = captured["headers"]["anthropic-beta"].split(",")
    extra = {k: body.pop(k) for k in ("context_management", "output_config")}
    client = anthropic.Anthropic(
        base_url=served.url,
        auth_token=served.token,
        default_headers=headers,
        max_retries=0,
        timeout=600,
    )
    with client.beta.messages.stream(
        **{**body, "max_tokens": 48}, betas=betas, extra_body={**extra, "temperature": 0}
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    client.close()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert final.stop_reason in ("end_turn", "max_tokens", "tool_use") and final.content
    schemas = {tool["name"]: tool["input_schema"] for tool in body["tools"]}
    for block in final.content:
        if block.type == "tool_use":
            jsonschema.validate(block.input, schemas[block.name])
        else:
            assert block.type == "text" and block.text
    task = task_of(served, final.id)
    assert task["state"] in ("completed", "incomplete") and task["api"] == "anthropic.messages"
    assert any("context_management" in n for n in task["notes"])
    assert any("output_config" in n for n in task["notes"])
    assert any("thinking" in n.lower() for n in task["notes"])
