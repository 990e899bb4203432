"""Chat messages become a prompt through the model's template; bad input is a clear error."""

from __future__ import annotations

import pytest

from lmsp_desktop.core.engines.base import EngineError
from lmsp_desktop.core.engines.llama_chat import ChatRenderer

STRICT = (
    "{% for m in messages %}"
    "{% if (m['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant') }}"
    "{% endif %}[{{ m['role'] }}]{{ m['content'] }}{% endfor %}"
    "{% if add_generation_prompt %}[assistant]{% endif %}"
)


def test_model_without_template_falls_back_to_chatml() -> None:
    renderer = ChatRenderer(None, bos_token="<s>", eos_token="</s>")
    prompt = renderer.render([{"role": "user", "content": "Hi"}])
    assert prompt == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"


def test_developer_messages_are_rendered_as_system_messages() -> None:
    renderer = ChatRenderer(None, bos_token="", eos_token="")
    prompt = renderer.render(
        [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    )
    assert prompt.startswith("<|im_start|>system\nBe brief.<|im_end|>\n")


def test_template_rejection_is_an_engine_error_saying_what_to_fix() -> None:
    renderer = ChatRenderer(STRICT, bos_token="", eos_token="")
    assert renderer.render([{"role": "user", "content": "a"}]) == "[user]a[assistant]"
    with pytest.raises(EngineError) as info:
        renderer.render([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
    assert info.value.code == "chat_template_error"
    assert "alternate" in info.value.message


def test_no_messages_is_an_engine_error() -> None:
    with pytest.raises(EngineError) as info:
        ChatRenderer(None, bos_token="", eos_token="").render([])
    assert info.value.code == "invalid_input"
