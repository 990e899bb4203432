"""Legacy completions take a prompt of token ids, or a list holding one prompt, answering as
the same text does; several prompts a choice each. The openai SDK over
real HTTP, the demo model."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from lmsp_desktop.core.context_window import _Vocab
from lmsp_desktop.core.models.demo import demo_model_path
from tests.integration.service_fixtures import MODEL, LiveCore
from tests.support.plain_http import openai_sdk, plain_client

pytest_plugins = ["tests.integration.service_fixtures"]


@pytest.fixture
def web(live: LiveCore) -> Iterator[httpx.Client]:
    with plain_client(live) as client:
        yield client


def demo_tokens(text: str) -> list[int]:
    path = demo_model_path()
    assert path is not None
    vocab = _Vocab(Path(path), None)
    try:
        return vocab._tokenize(text.encode(), False, True)
    finally:
        vocab.close()


def test_a_completion_takes_token_ids_and_one_prompt_lists(web: httpx.Client) -> None:
    client = openai_sdk(web)
    text = "The capital of France is"
    asked: dict[str, Any] = {"model": MODEL, "max_tokens": 6, "temperature": 0}
    as_text = client.completions.create(prompt=text, **asked)
    ids = demo_tokens(text)
    for prompt in (ids, [ids], [text]):
        same = client.completions.create(prompt=prompt, **asked)
        assert same.choices[0].text == as_text.choices[0].text, prompt
        assert same.usage and as_text.usage
        assert same.usage.prompt_tokens == as_text.usage.prompt_tokens
    # Several prompts: one choice each (test_completions_several_prompts.py).
    several = client.completions.create(prompt=[ids, ids], **asked)
    assert [c.text for c in several.choices] == [as_text.choices[0].text] * 2
    # A token id the model's vocabulary does not have: 400 before any task.
    with pytest.raises(openai.BadRequestError) as refused:
        client.completions.create(prompt=[10**9], **asked)
    assert refused.value.param == "prompt" and "vocabulary" in refused.value.message
    client.close()
