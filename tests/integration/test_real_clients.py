"""Real clients, unchanged, against the real service and demo model: the official `openai`
SDK over Chat Completions and Responses (conversation state across a restart, input items,
context limits, the stream snapshot), and openai-agents over both APIs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from openai import AsyncOpenAI, OpenAI

from lmsp_desktop.core.models.memory import ModelSettings
from lmsp_desktop.core.storage.model_settings import save_settings
from tests.integration.serve_process import ServeProcess, create_token
from tests.integration.service_fixtures import MODEL, USER_SCOPES, LiveCore

pytest_plugins = ["tests.integration.service_fixtures"]

FRANCE = "What is the capital of France? One word."
# About 2 tokens per repetition through the demo model's tokenizer and chat template.
FILLER = "hello world "
# A third turn the demo model answers without looping at temperature 0.
THIRD = "What is the capital of France?"


@pytest.fixture
def sdk(live: LiveCore) -> Iterator[OpenAI]:
    client = OpenAI(
        base_url=live.url + "/v1", api_key=live.token(*USER_SCOPES), max_retries=0, timeout=300
    )
    try:
        yield client
    finally:
        client.close()


# -- Chat Completions ------------------------------------------------------------------------
def test_chat_completions_create(sdk: OpenAI) -> None:
    completion = sdk.chat.completions.create(
        model=MODEL,
        messages=[
            {"role": "system", "content": "Answer briefly."},
            {"role": "user", "content": FRANCE},
        ],
        max_tokens=24,
        temperature=0,
    )
    assert completion.id.startswith("chatcmpl-") and completion.object == "chat.completion"
    choice = completion.choices[0]
    assert choice.finish_reason == "stop" and choice.message.role == "assistant"
    assert "Paris" in (choice.message.content or "")
    assert completion.usage is not None and completion.usage.completion_tokens >= 1
    # Every chat completion is a task the app shows.
    task = sdk.get(f"/tasks/{completion.id}", cast_to=object)
    assert isinstance(task, dict) and task["state"] == "completed"


def test_chat_completions_stream_with_usage(sdk: OpenAI) -> None:
    stream = sdk.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": FRANCE}],
        max_tokens=24,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "Paris" in text
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "stop" and set(finishes[:-1]) == {None}
    usage = chunks[-1].usage
    assert chunks[-1].choices == [] and usage is not None
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    again = sdk.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": FRANCE}], max_tokens=24, temperature=0
    )
    assert again.choices[0].message.content == text  # the same answer, plain or streamed


# -- Responses: conversation state, input items, context, the stream snapshot ---------------
def test_input_items_list(sdk: OpenAI) -> None:
    response = sdk.responses.create(
        model=MODEL,
        input=[
            {"role": "user", "content": "My name is Ada."},
            {"role": "assistant", "content": "Hello Ada!"},
            {"role": "user", "content": "What is my name?"},
        ],
        max_output_tokens=8,
        temperature=0,
    )
    items = list(sdk.responses.input_items.list(response.id, order="asc"))
    assert [i.role for i in items] == ["user", "assistant", "user"]  # type: ignore[union-attr]
    assert items[0].content[0].text == "My name is Ada."  # type: ignore[union-attr]
    newest_first = list(sdk.responses.input_items.list(response.id, limit=1))
    assert [i.id for i in newest_first] == [i.id for i in reversed(items)]  # paged by one


# The context tests run on a service of their own whose demo model is set to a 1,024-token
# context (as `lmsp-desktop models set NAME --context 1024` does): a prompt of ~760 tokens
# is then as near the limit as ~6,100 were at the trained 8,192, and is read in two
# 512-token prefill chunks, for a fraction of the time. (At 2,048, its ~1,500 tokens were
# the module's largest cost: a prompt token costs about as much CPU as a generated one.)
SMALL_CONTEXT = 1024
# Past the small context alone (~1,100 tokens).
TOO_LONG = FILLER * 550


@pytest.fixture(scope="module")
def small_live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveCore]:
    running = LiveCore(tmp_path_factory.mktemp("small-context"))
    try:
        running.call(
            save_settings(running.core.store.db, MODEL, ModelSettings(context_length=SMALL_CONTEXT))
        )
        yield running
    finally:
        running.stop()


@pytest.fixture
def small_sdk(small_live: LiveCore) -> Iterator[OpenAI]:
    client = OpenAI(
        base_url=small_live.url + "/v1",
        api_key=small_live.token(*USER_SCOPES),
        max_retries=0,
        timeout=300,
    )
    try:
        yield client
    finally:
        client.close()


# A bound on a hang, not on its speed: a loaded machine reads prompts many times slower.
@pytest.mark.timeout(900)
def test_a_long_input_fits_and_a_too_long_one_is_refused(small_sdk: OpenAI) -> None:
    """A prompt of two prefill chunks, three quarters of the model's context, reaches the
    model whole (every token counted, the question at its end answered); one past the
    context is refused with context_length_exceeded, by Responses and by a Chat Completions
    stream alike, before any task exists."""
    sdk = small_sdk
    model = sdk.models.retrieve(MODEL)
    assert model.context_length == SMALL_CONTEXT  # type: ignore[attr-defined]
    fits = sdk.with_options(timeout=900).responses.create(
        model=MODEL, input=FILLER * 370 + "\n\n" + FRANCE, max_output_tokens=12, temperature=0
    )
    assert fits.status == "completed" and "Paris" in fits.output_text, fits.output_text
    assert fits.usage is not None and 750 <= fits.usage.input_tokens < SMALL_CONTEXT
    before = sdk.get("/tasks", cast_to=object)
    with pytest.raises(openai.BadRequestError) as refused:
        sdk.responses.create(model=MODEL, input=TOO_LONG, max_output_tokens=4)
    error = refused.value.body
    assert isinstance(error, dict) and error["code"] == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError):
        sdk.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": TOO_LONG}], stream=True
        )
    assert sdk.get("/tasks", cast_to=object) == before  # refused before any task existed


def test_truncation_auto_drops_the_oldest_turns_to_fit(
    small_sdk: OpenAI, small_live: LiveCore
) -> None:
    sdk, live = small_sdk, small_live
    old_turns: list[Any] = []
    for i in range(4):  # the oldest turn alone is longer than the model's context
        old_turns += [
            {"role": "user", "content": f"Turn {i}. " + (TOO_LONG if i == 0 else "Hi.")},
            {"role": "assistant", "content": "Noted."},
        ]
    last = {"role": "user", "content": FRANCE}
    turns = [{"role": "developer", "content": "Answer briefly."}, *old_turns, last]
    with pytest.raises(openai.BadRequestError):
        sdk.responses.create(model=MODEL, input=turns, max_output_tokens=4)
    fitted = sdk.responses.create(
        model=MODEL, input=turns, max_output_tokens=4, temperature=0, truncation="auto"
    )
    assert fitted.truncation == "auto" and fitted.usage is not None
    assert fitted.usage.input_tokens < SMALL_CONTEXT
    seen = json.loads(live.call(live.core.store.tasks.get(fitted.id))["request"])["messages"]
    # The developer message and the last turn stay; whole turns went from the oldest on.
    assert seen[0]["content"] == "Answer briefly." and seen[-1] == last
    kept = [m["content"].split(".")[0] for m in seen[1:-1] if m["role"] == "user"]
    assert kept == ["Turn 1", "Turn 2", "Turn 3"]


def test_stream_snapshot_equals_the_final_response(sdk: OpenAI) -> None:
    with sdk.responses.stream(
        model=MODEL, input=FRANCE, max_output_tokens=24, temperature=0
    ) as stream:
        events = list(stream)
        final = stream.get_final_response()
        # The SDK's own accumulation of the events (what its stream helpers hand out).
        snapshot = stream._state._ResponseStreamState__current_snapshot  # type: ignore[attr-defined]
    deltas = [e for e in events if e.type == "response.output_text.delta"]
    assert deltas[-1].snapshot == final.output_text and "Paris" in final.output_text
    # One item with one part: output_item.added carries no part of its own.
    assert [len(item.content) for item in snapshot.output] == [1]
    # The snapshot equals the final response, but for the item's status: the SDK keeps the
    # status an item was announced with (in_progress), whatever the server.
    seen = [item.model_dump(exclude={"status"}) for item in snapshot.output]
    assert seen == [item.model_dump(exclude={"status"}) for item in final.output]


def test_previous_response_id_across_a_restart(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    token = create_token(data_dir, "responses:read,responses:write")
    first_service = ServeProcess(data_dir)
    url = first_service.start(timeout=120)
    try:
        client = OpenAI(base_url=url + "/v1", api_key=token, max_retries=0, timeout=120)
        first = client.responses.create(
            model=MODEL, input="My name is Ada.", max_output_tokens=16, temperature=0
        )
    finally:
        first_service.terminate()
    second_service = ServeProcess(data_dir)
    url = second_service.start(timeout=120)
    try:
        client = OpenAI(base_url=url + "/v1", api_key=token, max_retries=0, timeout=120)
        second = client.responses.create(
            model=MODEL,
            input="What is my name? Answer with the name only.",
            previous_response_id=first.id,
            max_output_tokens=16,
            temperature=0,
        )
        assert second.previous_response_id == first.id
        assert "Ada" in second.output_text
        # The chain is really there: the same question without it does not know the name.
        alone = client.responses.create(
            model=MODEL,
            input="What is my name? Answer with the name only.",
            max_output_tokens=16,
            temperature=0,
        )
        assert "Ada" not in alone.output_text
    finally:
        second_service.terminate()


# -- openai-agents -----------------------------------------------------------------------------
def _agent(model: Any) -> Any:
    from agents import Agent, ModelSettings

    return Agent(
        name="Assistant",
        instructions="You are a helpful assistant. Answer briefly.",
        model=model,
        model_settings=ModelSettings(temperature=0, max_tokens=160),  # ends its turn
    )


def _seen_by_model(live: LiveCore, token: str) -> list[list[dict[str, Any]]]:
    """The messages each of this client's tasks gave the model, oldest task first."""
    from tests.integration.serve_process import call

    status, page = call(live.url + "/v1/tasks?limit=100", token)
    assert status == 200, page
    rows = [live.call(live.core.store.tasks.get(t["id"])) for t in reversed(page["data"])]
    return [json.loads(row["request"])["messages"] for row in rows]


# The turns run on the test's one loop (Runner.run, not run_sync): an AsyncOpenAI client
# carried from one run_sync loop into the next schedules its generators on a closed loop.
async def test_openai_agents_over_chat_completions_multi_turn(live: LiveCore) -> None:
    from agents import OpenAIChatCompletionsModel, Runner, set_tracing_disabled

    set_tracing_disabled(True)
    token = live.token(*USER_SCOPES)
    async with AsyncOpenAI(base_url=live.url + "/v1", api_key=token) as client:
        agent = _agent(OpenAIChatCompletionsModel(model=MODEL, openai_client=client))
        first = await Runner.run(agent, "My name is Ada. Say hello to me.")
        assert first.final_output
        turn = [*first.to_input_list(), {"role": "user", "content": "What is my name?"}]
        second = await Runner.run(agent, turn)
        assert second.final_output
    one, two = _seen_by_model(live, token)
    assert one[0]["role"] == "system" and one[-1]["content"] == "My name is Ada. Say hello to me."
    # The second turn carries the first: question, answer, then the new question.
    assert [m["content"] for m in two[1:]] == [
        "My name is Ada. Say hello to me.",
        first.final_output,
        "What is my name?",
    ]


async def test_openai_agents_over_responses_multi_turn(live: LiveCore) -> None:
    from agents import OpenAIResponsesModel, Runner, set_tracing_disabled

    set_tracing_disabled(True)
    token = live.token(*USER_SCOPES)
    async with AsyncOpenAI(base_url=live.url + "/v1", api_key=token) as client:
        agent = _agent(OpenAIResponsesModel(model=MODEL, openai_client=client))
        first = await Runner.run(agent, "My name is Ada. Say hello to me.")
        assert first.final_output
        # Chained by id: the service puts the stored turn first.
        second = await Runner.run(
            agent, "What is my name?", previous_response_id=first.last_response_id
        )
        assert second.final_output
        # Chained by the client sending the history back as items.
        third = await Runner.run(
            agent, [*second.to_input_list(), {"role": "user", "content": THIRD}]
        )
        assert third.final_output
    _, two, three = _seen_by_model(live, token)
    expected = ["My name is Ada. Say hello to me.", first.final_output, "What is my name?"]
    assert [m["content"] for m in two] == expected
    # (that run's own input and output: the client chose not to chain by id this time)
    assert [m["content"] for m in three] == ["What is my name?", second.final_output, THIRD]
