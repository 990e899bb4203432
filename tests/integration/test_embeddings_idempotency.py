"""Embeddings are idempotent under an Idempotency-Key (LMSP_API.md: any POST), on
`/v1/embeddings` and Ollama's `/api/embed` and `/api/embeddings`: the answer replayed, no second
task; another body under the key, 422. Real HTTP, the demo model."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.integration.service_fixtures import MODEL, LiveCore
from tests.support.plain_http import plain_client

pytest_plugins = ["tests.integration.service_fixtures"]


@pytest.fixture
def web(live: LiveCore) -> Iterator[httpx.Client]:
    with plain_client(live) as client:
        yield client


def openai_vectors(answer: dict[str, Any]) -> list[Any]:
    return [item["embedding"] for item in answer["data"]]


@pytest.mark.parametrize(
    ("path", "body", "vectors"),
    [
        ("/v1/embeddings", {"input": ["one", "two"]}, openai_vectors),
        ("/api/embed", {"input": ["one", "two"]}, lambda a: a["embeddings"]),
        ("/api/embeddings", {"prompt": "one"}, lambda a: [a["embedding"]]),
    ],
)
def test_an_embedding_is_idempotent_under_its_key(
    web: httpx.Client, path: str, body: dict[str, Any], vectors: Any
) -> None:
    body = {"model": MODEL, **body}
    key = {"Idempotency-Key": f"embed-{path}"}
    first = web.post(path, json=body, headers=key)
    assert first.status_code == 200, first.text
    assert "Idempotent-Replayed" not in first.headers
    again = web.post(path, json=body, headers=key)
    assert again.status_code == 200, again.text
    assert again.headers["Idempotent-Replayed"] == "true"
    assert vectors(again.json()) == vectors(first.json())
    listed = web.get("/v1/tasks", params={"limit": 100}).json()["data"]
    assert len(listed) == 1, listed  # the retry made no second task
    other = {k: "other" if k in ("input", "prompt") else v for k, v in body.items()}
    other_answer = web.post(path, json=other, headers=key)
    assert other_answer.status_code == 422, other_answer.text
    assert "different request body" in other_answer.text
