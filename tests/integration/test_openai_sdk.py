"""The official `openai` Python SDK, unchanged, against the real service and demo model.

The Core runs on its own loop in a background thread (service_fixtures.LiveCore), so these
tests use the synchronous SDK directly, as a user's script would.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest
from openai import OpenAI
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseCreatedEvent,
    ResponseIncompleteEvent,
    ResponseTextDeltaEvent,
)

from tests.integration.service_fixtures import (
    LONG,
    MODEL,
    USER_SCOPES,
    LiveCore,
)
from tests.support.polling import until_sync

pytest_plugins = ["tests.integration.service_fixtures"]

SHORT: dict[str, Any] = {"max_output_tokens": 12, "temperature": 0}
FINAL = ("completed", "incomplete")


@pytest.fixture
def sdk(live: LiveCore) -> Iterator[OpenAI]:
    client = OpenAI(
        base_url=live.url + "/v1", api_key=live.token(*USER_SCOPES), max_retries=0, timeout=120
    )
    try:
        yield client
    finally:
        client.close()


def wait_status(sdk: OpenAI, response_id: str, statuses: tuple[str, ...]) -> Response:
    seen: list[Response | None] = [None]

    def reached() -> Response | None:
        seen[0] = sdk.responses.retrieve(response_id)
        return seen[0] if seen[0].status in statuses else None

    return until_sync(
        reached, 90, lambda: f"{response_id} to leave {seen[0] and seen[0].status}", 0.05
    )


def test_create_sync(sdk: OpenAI) -> None:
    response = sdk.responses.create(model=MODEL, input="Say hello.", **SHORT)
    assert isinstance(response, Response)
    assert response.status in FINAL and response.model == MODEL
    assert response.output_text.strip()  # the SDK's own aggregation of the output items
    assert response.usage is not None and 1 <= response.usage.output_tokens <= 12
    assert response.temperature == 0 and response.max_output_tokens == 12


def test_create_with_instructions_and_message_items(sdk: OpenAI) -> None:
    response = sdk.responses.create(
        model=MODEL,
        instructions="Answer in one short sentence.",
        input=[
            {"role": "user", "content": "My name is Ada."},
            {"role": "assistant", "content": "Hello Ada!"},
            {"role": "user", "content": [{"type": "input_text", "text": "What is my name?"}]},
        ],
        **SHORT,
    )
    assert response.status in FINAL and response.output_text
    assert response.instructions == "Answer in one short sentence."


def test_create_stream(sdk: OpenAI) -> None:
    events = []
    with sdk.responses.create(model=MODEL, input="Say hello.", stream=True, **SHORT) as stream:
        for event in stream:
            events.append(event)
    assert isinstance(events[0], ResponseCreatedEvent)
    assert isinstance(events[-1], ResponseCompletedEvent | ResponseIncompleteEvent)
    text = "".join(e.delta for e in events if isinstance(e, ResponseTextDeltaEvent))
    assert text and text == events[-1].response.output_text
    numbers = [e.sequence_number for e in events]
    assert numbers == sorted(numbers)


def test_background_then_retrieve_until_done(sdk: OpenAI) -> None:
    accepted = sdk.responses.create(model=MODEL, input="Say hello.", background=True, **SHORT)
    assert accepted.status == "queued" and accepted.background is True
    done = wait_status(sdk, accepted.id, FINAL)
    assert done.id == accepted.id and done.output_text


def test_retrieve_stream_starting_after(sdk: OpenAI) -> None:
    done = sdk.responses.create(model=MODEL, input="Say hello.", **SHORT)
    with sdk.responses.retrieve(done.id, stream=True, starting_after=3) as stream:
        events = list(stream)
    assert events and all(e.sequence_number > 3 for e in events)
    assert isinstance(events[-1], ResponseCompletedEvent | ResponseIncompleteEvent)
    assert events[-1].response.output_text == done.output_text
    with sdk.responses.retrieve(done.id, stream=True) as stream:
        full = list(stream)
    assert [e.sequence_number for e in full if e.sequence_number > 3] == [
        e.sequence_number for e in events
    ]


def test_cancel_then_delete(sdk: OpenAI) -> None:
    accepted = sdk.responses.create(model=MODEL, background=True, **LONG)
    wait_status(sdk, accepted.id, ("in_progress",))
    # The answer waits for the engine to stop (within a token): cancelled, as at OpenAI.
    answered = sdk.responses.cancel(accepted.id)
    assert answered.id == accepted.id and answered.status == "cancelled"
    cancelled = wait_status(sdk, accepted.id, ("cancelled",))
    assert cancelled.output[0].status == "incomplete"  # type: ignore[union-attr]
    assert sdk.responses.cancel(accepted.id).status == "cancelled"  # idempotent
    assert sdk.responses.delete(accepted.id) is None
    with pytest.raises(openai.NotFoundError):
        sdk.responses.retrieve(accepted.id)


def test_a_cancelled_stream_raises_the_sdk_error_with_code_cancelled(sdk: OpenAI) -> None:
    with sdk.responses.create(model=MODEL, stream=True, **LONG) as stream:
        response_id = None
        with pytest.raises(openai.APIError) as caught:
            for event in stream:
                if isinstance(event, ResponseCreatedEvent):
                    response_id = event.response.id
                if isinstance(event, ResponseTextDeltaEvent):
                    assert response_id is not None
                    sdk.responses.cancel(response_id)
    assert caught.value.code == "cancelled"
    assert response_id is not None
    assert wait_status(sdk, response_id, ("cancelled",)).status == "cancelled"


def test_errors_map_to_the_sdk_exceptions(sdk: OpenAI, live: LiveCore) -> None:
    with pytest.raises(openai.NotFoundError) as not_found:
        sdk.responses.create(model="no-such-model", input="Hi", **SHORT)
    assert not_found.value.code == "model_not_found" and not_found.value.param == "model"
    with pytest.raises(openai.BadRequestError) as bad:
        sdk.responses.create(
            model=MODEL,
            input="Hi",
            tools=[{"type": "function", "name": "f", "parameters": {"not": {}}, "strict": True}],
            **SHORT,
        )
    assert bad.value.param == "tools[0].parameters.not"
    stranger = OpenAI(base_url=live.url + "/v1", api_key="lmsp_" + "x" * 40, max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        stranger.responses.create(model=MODEL, input="Hi", **SHORT)
    stranger.close()
    reader = OpenAI(base_url=live.url + "/v1", api_key=live.token("responses:read"), max_retries=0)
    with pytest.raises(openai.PermissionDeniedError):
        reader.responses.create(model=MODEL, input="Hi", **SHORT)
    reader.close()
