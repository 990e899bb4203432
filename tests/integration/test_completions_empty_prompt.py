"""Legacy completions with an empty prompt, through a real `serve` and the demo model, with
the official `openai` SDK. OpenAI's API reference: "if a prompt is not specified the model
will generate as if from the beginning of a new document"; llama-server reads an empty
prompt as its BOS token alone (llama.cpp PR 5953). The demo model's tokenizer adds no BOS
of its own, so "" gave no tokens at all, and the task failed 500 engine_error; now it
starts from the model's beginning-of-text token, as both do."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from openai import OpenAI

from tests.integration.serve_process import ServeProcess, create_token

MODEL = "smollm2-135m-instruct"


@pytest.fixture(scope="module")
def sdk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OpenAI]:
    data_dir = tmp_path_factory.mktemp("empty-prompt") / "data"
    token = create_token(data_dir, "models:read,responses:read,responses:write")
    server = ServeProcess(data_dir)
    url = server.start()
    client = OpenAI(base_url=url + "/v1", api_key=token, max_retries=0, timeout=300)
    try:
        yield client
    finally:
        client.close()
        if server.proc is not None and server.proc.poll() is None:
            server.terminate()


@pytest.mark.parametrize("prompt", ["", [""]])
def test_an_empty_prompt_generates_from_the_beginning_of_a_document(
    sdk: OpenAI, prompt: str | list[str]
) -> None:
    completion = sdk.completions.create(model=MODEL, prompt=prompt, max_tokens=4, temperature=0)
    choice = completion.choices[0]
    assert choice.finish_reason in ("length", "stop")
    assert completion.usage is not None
    # The beginning-of-text token alone was read, and the model wrote from there.
    assert completion.usage.prompt_tokens == 1
    assert completion.usage.completion_tokens >= 1 and choice.text is not None


def test_an_empty_prompt_streams_too(sdk: OpenAI) -> None:
    stream = sdk.completions.create(
        model=MODEL, prompt="", max_tokens=4, temperature=0, stream=True
    )
    chunks = list(stream)
    assert chunks and chunks[-1].choices[0].finish_reason in ("length", "stop")
