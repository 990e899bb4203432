"""Picking a repo's model by quant or file name, the quant in GGUF file names, and where the
Hugging Face token comes from (pure functions; the hub itself is in the integration tests)."""

from __future__ import annotations

import pytest

from lmsp_desktop.core.downloads import token as hub_token_module
from lmsp_desktop.core.downloads.hub import HubFile, check_repo, gguf_choices, pick, quant_of
from lmsp_desktop.core.downloads.pull import split_reference
from lmsp_desktop.core.errors import LmspError


@pytest.mark.parametrize(
    ("name", "quant"),
    [
        ("Qwen2.5-7B-Instruct-Q4_K_M.gguf", "Q4_K_M"),
        ("SmolLM2-135M-Instruct.Q4_1.gguf", "Q4_1"),
        ("Llama-3.2-3B-Instruct-IQ3_XS.gguf", "IQ3_XS"),
        ("gemma-2-2b-it-f16.gguf", "F16"),
        ("model-bf16-00001-of-00002.gguf", "BF16"),
        ("sub/phi-3.5-mini-instruct.q8_0.gguf", "Q8_0"),
        ("tinyllama.gguf", None),
    ],
)
def test_the_quant_is_read_from_the_file_name(name: str, quant: str | None) -> None:
    assert quant_of(name) == quant


FILES = [
    HubFile("README.md", 10, None),
    HubFile("m-Q4_K_M.gguf", 100, "a" * 64),
    HubFile("m-Q8_0.gguf", 200, "b" * 64),
    HubFile("big/m-Q2_K-00002-of-00002.gguf", 50, "c" * 64),
    HubFile("big/m-Q2_K-00001-of-00002.gguf", 60, "d" * 64),
    HubFile("mmproj-m-f16.gguf", 5, "e" * 64),
]


def test_split_parts_are_one_model_and_projectors_none() -> None:
    choices = gguf_choices(FILES)
    assert [c.label() for c in choices] == [
        "big/m-Q2_K-00001-of-00002.gguf (2 parts)",
        "m-Q4_K_M.gguf",
        "m-Q8_0.gguf",
    ]
    split = choices[0]
    assert split.files[0].name.endswith("00001-of-00002.gguf")  # part 1 first
    assert split.size == 110


def test_pick_by_quant_any_case_or_by_file_name() -> None:
    assert pick("o/r", FILES, "q8_0").name == "m-Q8_0.gguf"
    assert pick("o/r", FILES, "m-Q4_K_M.gguf").name == "m-Q4_K_M.gguf"
    assert pick("o/r", FILES, "m-Q4_K_M").name == "m-Q4_K_M.gguf"  # without .gguf
    assert len(pick("o/r", FILES, "Q2_K").files) == 2
    assert pick("o/r", FILES, "big/m-Q2_K-00002-of-00002.gguf").size == 110  # any part


def test_several_models_and_no_selector_asks_which() -> None:
    with pytest.raises(LmspError) as raised:
        pick("o/r", FILES, None)
    assert raised.value.code == "file_ambiguous"
    assert "Pull one as o/r:Q2_K" in raised.value.message
    assert pick("o/r", FILES[:2], None).name == "m-Q4_K_M.gguf"  # the only one


def test_repo_ids_are_checked_and_references_split() -> None:
    assert split_reference("o/r:Q4_K_M") == ("o/r", "Q4_K_M")
    assert split_reference("o/r") == ("o/r", None)
    assert (
        check_repo(" bartowski/Qwen2.5-7B-Instruct-GGUF ") == "bartowski/Qwen2.5-7B-Instruct-GGUF"
    )
    for bad in ("no-slash", "a/b/c", "../etc", "a/b c"):
        with pytest.raises(LmspError):
            check_repo(bad)


def test_hf_token_wins_over_the_keyring_and_the_keyring_keeps_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    saved: dict[tuple[str, str], str] = {}

    class Ring:
        @staticmethod
        def set_password(service: str, user: str, password: str) -> None:
            saved[(service, user)] = password

        @staticmethod
        def get_password(service: str, user: str) -> str | None:
            return saved.get((service, user))

        @staticmethod
        def delete_password(service: str, user: str) -> None:
            del saved[(service, user)]

    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr(hub_token_module, "_keyring", lambda: None)
    assert not hub_token_module.save_token("hf_x")  # no keyring: the caller says HF_TOKEN
    assert hub_token_module.hub_token() is None

    monkeypatch.setattr(hub_token_module, "_keyring", lambda: Ring)
    assert hub_token_module.save_token("hf_kept")
    assert hub_token_module.hub_token() == "hf_kept"
    monkeypatch.setenv("HF_TOKEN", "hf_env")
    assert hub_token_module.hub_token() == "hf_env"
    assert hub_token_module.save_token(None)  # forget it
    assert hub_token_module.stored_token() is None
