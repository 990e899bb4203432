"""A final assistant prefill (Anthropic's, Ollama's /api/chat) is rendered as the template
prints that turn, left open after its text: no generation prompt, no end-of-turn. Checked with
the demo model's template, plain ChatML and a Llama-3 style template that trims messages; a
final assistant message that is no prefill (Chat Completions) still ends its turn."""

from __future__ import annotations

from typing import Any

import pytest

from lmsp_desktop.core.api.anthropic.request import parse_messages_request
from lmsp_desktop.core.api.ollama.request import parse_ollama_chat
from lmsp_desktop.core.engines.llama_chat import ChatRenderer
from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.models.demo import demo_model_path
from lmsp_desktop.core.models.gguf_meta import read_gguf_meta

LLAMA3 = (
    "{{- bos_token }}{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' "
    "+ message['content'] | trim + '<|eot_id|>' }}{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
)
SMOL_SYSTEM = (
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
    "<|im_end|>\n"
)
CAT = [{"role": "user", "content": "Describe a cat."}]


def prefilled(text: str) -> list[dict[str, Any]]:
    return [*CAT, {"role": "assistant", "content": text, "prefill": True}]


def demo_template() -> str:
    template = read_gguf_meta(demo_model_path()).chat_template
    assert template
    return template


@pytest.mark.parametrize(
    ("template", "bos", "opened"),
    [
        ("demo", "", f"{SMOL_SYSTEM}<|im_start|>user\nDescribe a cat.<|im_end|>\n"),
        (None, "", "<|im_start|>user\nDescribe a cat.<|im_end|>\n"),
        (
            LLAMA3,
            "<|begin_of_text|>",
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nDescribe a cat."
            "<|eot_id|>",
        ),
    ],
    ids=["demo", "chatml", "llama3"],
)
def test_a_prefill_is_left_open_after_its_text(template: str | None, bos: str, opened: str) -> None:
    renderer = ChatRenderer(demo_template() if template == "demo" else template, bos, "</s>")
    turn = (
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
        if template == LLAMA3
        else "<|im_start|>assistant\n"
    )
    assert renderer.render(CAT) == opened + turn  # a new turn, as before
    assert renderer.render(prefilled("1. Fur color:")) == opened + turn + "1. Fur color:"
    # A message the template trims (Llama 3) loses its trailing space, as Transformers'
    # continue_final_message leaves it; one printed as it is keeps it.
    spaced = renderer.render(prefilled("Fur: "))
    assert spaced == opened + turn + ("Fur:" if template == LLAMA3 else "Fur: ")
    # An empty prefill opens the turn as usual.
    assert renderer.render(prefilled("")) == opened + turn


def test_a_final_assistant_message_without_the_mark_ends_its_turn() -> None:
    """Chat Completions: OpenAI has no prefill; the last assistant turn stays a finished one
    and the model answers in a new turn."""
    renderer = ChatRenderer(None, "", "")
    finished = [*CAT, {"role": "assistant", "content": "1. Fur color:"}]
    assert renderer.render(finished).endswith("1. Fur color:<|im_end|>\n<|im_start|>assistant\n")


def test_a_template_that_rewrites_the_turn_gets_the_text_after_its_opening() -> None:
    rewriting = (
        "{% for m in messages %}[{{ m['role'] }}]"
        "{% if m['role'] == 'assistant' %}{{ m['content'] | upper }}{% else %}{{ m['content'] }}"
        "{% endif %}[end]{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}"
    )
    renderer = ChatRenderer(rewriting, "", "")
    assert renderer.render(prefilled("Fur")) == "[user]Describe a cat.[end][assistant]Fur"
    # The same words in an earlier turn are not taken for the last turn's.
    asked = [{"role": "user", "content": "Fur or scales?"}, prefilled("Fur")[-1]]
    assert renderer.render(asked) == "[user]Fur or scales?[end][assistant]Fur"


def test_the_anthropic_and_ollama_parsers_mark_a_final_assistant_turn() -> None:
    anthropic = parse_messages_request(
        {
            "model": "m",
            "max_tokens": 8,
            "messages": [*CAT, {"role": "assistant", "content": [{"type": "text", "text": "1."}]}],
        },
        "fail",
    )
    assert anthropic["messages"][-1] == {"role": "assistant", "content": "1.", "prefill": True}
    ollama = parse_ollama_chat(
        {"model": "m", "messages": [*CAT, {"role": "assistant", "content": "1."}]}, "fail"
    )
    assert ollama["messages"][-1] == {"role": "assistant", "content": "1.", "prefill": True}
    # Earlier assistant turns, and a final one that calls tools, are finished turns.
    turns = [*CAT, {"role": "assistant", "content": "Hi"}, *CAT]
    assert not any(
        m.get("prefill")
        for m in parse_ollama_chat({"model": "m", "messages": turns}, "fail")["messages"]
    )
    calling = {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f"}}]}
    called = parse_ollama_chat({"model": "m", "messages": [*CAT, calling]}, "fail")
    assert "prefill" not in called["messages"][-1]


def test_anthropic_refuses_a_prefill_ending_in_white_space() -> None:
    with pytest.raises(LmspError) as refused:
        parse_messages_request(
            {
                "model": "m",
                "max_tokens": 8,
                "messages": [*CAT, {"role": "assistant", "content": "1. Fur color: "}],
            },
            "fail",
        )
    assert refused.value.status == 400 and refused.value.param == "messages[1].content"
    assert "trailing whitespace" in refused.value.message
