"""An assistant prefill is continued on Anthropic's `/v1/messages` and Ollama's `/api/chat`,
with the official clients against the real service and demo model: the answer is what the
model writes after the open turn (the same prompt sent as a raw completion gives the same
text), never a new turn, and it does not repeat the prefill."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import pytest
from ollama import Client

from tests.integration.serve_process import call
from tests.integration.service_fixtures import MODEL, USER_SCOPES, LiveCore

pytest_plugins = ["tests.integration.service_fixtures"]

CAT = "Describe a cat."
FUR = "1. Fur color:"
# The demo model's template (its default system message first) with the assistant's turn
# left open after the prefill, written out here rather than rendered by the code under test.
OPEN_PROMPT = (
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
    "<|im_end|>\n<|im_start|>user\nDescribe a cat.<|im_end|>\n<|im_start|>assistant\n"
    "1. Fur color:"
)
TOKENS = 16


@pytest.fixture
def token(live: LiveCore) -> str:
    return live.token(*USER_SCOPES)


@pytest.fixture
def sdk(live: LiveCore, token: str) -> Iterator[anthropic.Anthropic]:
    client = anthropic.Anthropic(base_url=live.url, api_key=token, max_retries=0, timeout=300)
    yield client
    client.close()


def continued(live: LiveCore, token: str) -> str:
    """What the model writes after the open turn: the raw prompt as a legacy completion."""
    status, body = call(
        f"{live.url}/v1/completions",
        token,
        "POST",
        {"model": MODEL, "prompt": OPEN_PROMPT, "max_tokens": TOKENS, "temperature": 0},
    )
    assert status == 200, body
    text: str = body["choices"][0]["text"]
    assert text.strip()
    return text


def anthropic_text(sdk: anthropic.Anthropic, messages: list[dict[str, Any]]) -> str:
    message = sdk.messages.create(
        model=MODEL,
        max_tokens=TOKENS,
        messages=messages,  # type: ignore[arg-type]
        extra_body={"temperature": 0},
    )
    return "".join(b.text for b in message.content if b.type == "text")


def test_anthropic_continues_the_prefill(
    sdk: anthropic.Anthropic, live: LiveCore, token: str
) -> None:
    asked = [{"role": "user", "content": CAT}, {"role": "assistant", "content": FUR}]
    assert anthropic_text(sdk, asked) == continued(live, token)
    # Anthropic's own example: the answer goes on from the prefix, not repeating it.
    france = [
        {"role": "user", "content": "What is the capital of France?"},
        {"role": "assistant", "content": "The capital of France is"},
    ]
    text = anthropic_text(sdk, france)
    assert "Paris" in text and "capital of France" not in text


def test_ollama_chat_continues_a_final_assistant_message(live: LiveCore, token: str) -> None:
    client = Client(host=live.url, headers={"Authorization": f"Bearer {token}"}, timeout=300)
    try:
        answer = client.chat(
            MODEL,
            [{"role": "user", "content": CAT}, {"role": "assistant", "content": FUR}],
            options={"temperature": 0, "num_predict": TOKENS},
            stream=False,
        )
    finally:
        client._client.close()
    assert answer.message.content == continued(live, token)
