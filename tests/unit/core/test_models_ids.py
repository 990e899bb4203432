"""Model ids: readable names from file names, and ids from clients that can never be paths."""

from __future__ import annotations

import pytest

from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.models.ids import (
    check_model_id,
    is_valid_model_id,
    slug_from_filename,
    source_model_id,
    unique_model_id,
)

HOSTILE_IDS = [
    "../x",
    "..",
    "../../etc/passwd",
    "/etc/passwd",
    "/abs/model.gguf",
    "a//b",
    "a/",
    "a/../b",
    "a/./b",
    "a:b:c",
    "a\\b",
    "..\\x",
    "%2e%2e",
    "%2e%2e%2fx",
    "..%2f",
    "x\x00",
    "\x00",
    "C:\\models\\x.gguf",
    ".hidden",
    "a..b",
    "~root",
    "",
    " ",
    "x" * 200,
    "a/" + "x" * 130,
    "a/b/c/d/e",
]


@pytest.mark.parametrize(
    ("filename", "expected"),
    [
        ("SmolLM2-135M-Instruct.Q4_1.gguf", "smollm2-135m-instruct.q4_1"),
        ("Llama 3 (8B) Instruct.gguf", "llama-3-8b-instruct"),
        ("..weird..name...gguf", "weird.name"),
        ("日本語モデル.gguf", "model"),
        ("über-Modell.GGUF", "uber-modell"),
    ],
)
def test_ids_are_readable_and_safe(filename: str, expected: str) -> None:
    slug = slug_from_filename(filename)
    assert slug == expected
    assert is_valid_model_id(slug)


def test_duplicate_names_get_a_suffix() -> None:
    assert unique_model_id("m", set()) == "m"
    assert unique_model_id("m", {"m"}) == "m-2"
    assert unique_model_id("m", {"m", "m-2"}) == "m-3"


@pytest.mark.parametrize("model_id", HOSTILE_IDS)
def test_hostile_ids_are_not_found(model_id: str) -> None:
    with pytest.raises(LmspError) as caught:
        check_model_id(model_id)
    assert caught.value.status == 404
    assert caught.value.code == "model_not_found"
    assert caught.value.param == "model"


def test_non_strings_are_not_found() -> None:
    for value in (None, 3, b"model", ["m"]):
        with pytest.raises(LmspError):
            check_model_id(value)


def test_ordinary_ids_pass() -> None:
    for model_id in (
        "smollm2-135m-instruct",
        "llama-3-8b.q4_k_m",
        "m-2",
        "qwen2.5-0.5b",
        "qwen2.5:7b",
        "bartowski/qwen2.5-7b-instruct-gguf:q4_k_m",
        "hf.co/bartowski/qwen2.5-7b-instruct-gguf:q4_k_m",
    ):
        assert check_model_id(model_id) == model_id


@pytest.mark.parametrize(
    ("parts", "tag", "expected"),
    [
        (["qwen2.5"], "7b", "qwen2.5:7b"),
        (
            ["bartowski", "Qwen2.5-7B-Instruct-GGUF"],
            "Q4_K_M",
            "bartowski/qwen2.5-7b-instruct-gguf:q4_k_m",
        ),
        (["hf.co", "Org", "Repo"], "latest", "hf.co/org/repo:latest"),
        (["..", "x"], "q4", None),  # nothing safe left of a part: no store name
        (["a"], "..", None),
    ],
)
def test_names_users_know_stay_safe(parts: list[str], tag: str, expected: str | None) -> None:
    assert source_model_id(parts, tag) == expected
