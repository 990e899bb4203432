"""Legacy completions (`POST /v1/completions`) with the official `openai` SDK, unchanged,
against a real `serve` process: the demo model (plain, stream, echo, an empty prompt;
`suffix` refused, as it has no fill-in-the-middle tokens) and a copy of it whose GGUF
declares FIM tokens, whose `suffix` requests go through llama.cpp's FIM path for real."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from openai import OpenAI

from tests.integration.serve_process import ServeProcess, call, create_token
from tests.support.gguf_fim import fim_demo_model_copy

MODEL = "smollm2-135m-instruct"
FIM_MODEL = "smollm2-fim"
PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    root = tmp_path_factory.mktemp("completions")
    models = root / "models"
    models.mkdir()
    fim_demo_model_copy(models / f"{FIM_MODEL}.gguf")
    data_dir: Path = root / "data"
    token = create_token(data_dir, "models:read,responses:read,responses:write")
    server = ServeProcess(data_dir, "--models-dir", str(models))
    url = server.start()
    try:
        yield url, token
    finally:
        if server.proc is not None and server.proc.poll() is None:
            server.terminate()


@pytest.fixture
def sdk(served: tuple[str, str]) -> Iterator[OpenAI]:
    url, token = served
    client = OpenAI(base_url=url + "/v1", api_key=token, max_retries=0, timeout=300)
    try:
        yield client
    finally:
        client.close()


def test_a_completion_continues_the_prompt_as_it_is(sdk: OpenAI, served: tuple[str, str]) -> None:
    completion = sdk.completions.create(model=MODEL, prompt=PROMPT, max_tokens=3, temperature=0)
    assert completion.id.startswith("cmpl-") and completion.object == "text_completion"
    choice = completion.choices[0]
    assert "Paris" in choice.text and choice.finish_reason == "length"
    # The prompt went in without a chat template: five tokens, not a templated turn.
    assert completion.usage is not None and completion.usage.prompt_tokens == 5
    assert completion.usage.completion_tokens == 3
    echoed = sdk.completions.create(
        model=MODEL, prompt=[PROMPT], max_tokens=3, temperature=0, echo=True
    )
    assert echoed.choices[0].text == PROMPT + choice.text
    url, token = served
    status, task = call(f"{url}/v1/tasks/{completion.id}", token)
    assert status == 200 and task["api"] == "completions"  # a task like the others


def test_a_completion_streams(sdk: OpenAI) -> None:
    plain = sdk.completions.create(model=MODEL, prompt=PROMPT, max_tokens=6, temperature=0)
    chunks = list(
        sdk.completions.create(
            model=MODEL,
            prompt=PROMPT,
            max_tokens=6,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == plain.choices[0].text
    reasons = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert reasons[-1] == "length" and set(reasons[:-1]) == {None}
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 6


def test_suffix_on_a_model_without_fim_tokens_is_refused(sdk: OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        sdk.completions.create(model=MODEL, prompt="def add(a, b):", suffix="\n", max_tokens=4)
    error = refused.value.body
    assert isinstance(error, dict) and error["code"] == "fim_unsupported"
    assert error["param"] == "suffix"
    with pytest.raises(openai.BadRequestError) as logprobs:
        sdk.completions.create(model=MODEL, prompt="x", logprobs=2, max_tokens=1)
    assert isinstance(logprobs.value.body, dict) and logprobs.value.body["param"] == "logprobs"


def test_fill_in_the_middle_through_the_models_fim_tokens(sdk: OpenAI) -> None:
    prefix, suffix = "def add(a, b):\n    ", "\n\nprint(add(1, 2))\n"
    alone = [
        sdk.completions.create(model=FIM_MODEL, prompt=p, max_tokens=1, temperature=0)
        for p in (prefix, suffix)
    ]
    middle = sdk.completions.create(
        model=FIM_MODEL, prompt=prefix, suffix=suffix, max_tokens=8, temperature=0
    )
    assert middle.choices[0].finish_reason in ("stop", "length")
    assert middle.usage is not None and middle.usage.completion_tokens >= 1
    # FIM_PRE prefix FIM_SUF suffix FIM_MID: both texts and the three FIM tokens (the demo's
    # vocabulary adds no BOS token).
    assert all(a.usage is not None for a in alone)
    sizes = [a.usage.prompt_tokens for a in alone if a.usage is not None]
    assert middle.usage.prompt_tokens == sum(sizes) + 3


@pytest.mark.parametrize("prompt", ["", [""]])
def test_an_empty_prompt_generates_from_the_beginning_of_a_document(
    sdk: OpenAI, prompt: str | list[str]
) -> None:
    """OpenAI's reference: "if a prompt is not specified the model will generate as if from
    the beginning of a new document"; llama-server reads "" as its BOS token alone (llama.cpp
    PR 5953). The demo's vocabulary adds no BOS, so "" gave no tokens and failed 500
    engine_error; it starts from the model's beginning-of-text token now."""
    completion = sdk.completions.create(model=MODEL, prompt=prompt, max_tokens=4, temperature=0)
    choice = completion.choices[0]
    assert choice.finish_reason in ("length", "stop")
    assert completion.usage is not None
    # The beginning-of-text token alone was read, and the model wrote from there.
    assert completion.usage.prompt_tokens == 1
    assert completion.usage.completion_tokens >= 1 and choice.text is not None
    stream = sdk.completions.create(model=MODEL, prompt=prompt, max_tokens=4, stream=True)
    chunks = list(stream)
    assert chunks and chunks[-1].choices[0].finish_reason in ("length", "stop")
