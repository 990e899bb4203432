"""The body of /v1/embeddings and Ollama's /api/embed(dings) into the embedding request, and
the answer's base64 (little-endian float32, as OpenAI's)."""

from __future__ import annotations

import base64
from typing import Any

import numpy as np
import pytest

from lmsp_desktop.core.api.embeddings.render import embedding_list
from lmsp_desktop.core.api.embeddings.request import parse_embeddings, parse_input
from lmsp_desktop.core.api.ollama.embed import parse_embed
from lmsp_desktop.core.api.ollama.embed import parse_embeddings as parse_ollama_embeddings
from lmsp_desktop.core.errors import LmspError


@pytest.mark.parametrize(
    ("sent", "inputs"),
    [
        ("one text", ["one text"]),
        (["a", "b"], ["a", "b"]),
        ([1, 2, 3], [[1, 2, 3]]),  # one input as token ids
        ([[1, 2], [3]], [[1, 2], [3]]),
        (["a", [5, 6]], ["a", [5, 6]]),
    ],
)
def test_every_input_shape_openai_documents(sent: Any, inputs: list[Any]) -> None:
    assert parse_input(sent) == inputs


@pytest.mark.parametrize(
    ("sent", "param"),
    [
        (None, "input"),
        ("", "input[0]"),
        ([], "input"),
        (["a", ""], "input[1]"),
        (["a", [1, -2]], "input[1]"),
        (["a", [True]], "input[1]"),
        ({"text": "a"}, "input"),
    ],
)
def test_bad_inputs_name_the_field(sent: Any, param: str) -> None:
    with pytest.raises(LmspError) as refused:
        parse_input(sent)
    assert refused.value.status == 400
    assert refused.value.param in (param, "input")


def test_dimensions_and_encoding_are_checked() -> None:
    with pytest.raises(LmspError) as dims:
        parse_embeddings({"model": "m", "input": "x", "dimensions": 8}, "fail")
    assert dims.value.param == "dimensions" and "not supported" in dims.value.message
    with pytest.raises(LmspError) as encoding:
        parse_embeddings({"model": "m", "input": "x", "encoding_format": "int8"}, "fail")
    assert encoding.value.param == "encoding_format"
    request = parse_embeddings({"model": "m", "input": "x", "user": "u"}, "retry")
    assert request["on_restart"] == "retry" and request["encoding_format"] == "float"
    assert request["api"] == "embeddings"


def test_a_lone_surrogate_is_replaced_not_a_crash() -> None:
    assert parse_input("a\ud800b") == ["a?b"]


def test_ollama_bodies() -> None:
    assert parse_embed({"model": "m", "input": ["a", "b"]}, "fail")["input"] == ["a", "b"]
    assert parse_ollama_embeddings({"model": "m", "prompt": "a"}, "fail")["input"] == ["a"]
    with pytest.raises(LmspError) as missing:
        parse_ollama_embeddings({"model": "m", "input": "a"}, "fail")
    assert missing.value.param == "prompt"


def test_base64_is_little_endian_float32() -> None:
    vectors = np.array([[0.5, -0.25, 1.0]], dtype=np.float32)
    row = {"model": "m", "input_tokens": 4}
    answer = embedding_list(row, vectors, {"encoding_format": "base64"})
    raw = base64.b64decode(answer["data"][0]["embedding"])
    assert np.frombuffer(raw, "<f4").tolist() == [0.5, -0.25, 1.0]
    plain = embedding_list(row, vectors, {"encoding_format": "float"})
    assert plain["data"] == [{"object": "embedding", "index": 0, "embedding": [0.5, -0.25, 1.0]}]
    assert plain["usage"] == {"prompt_tokens": 4, "total_tokens": 4}
