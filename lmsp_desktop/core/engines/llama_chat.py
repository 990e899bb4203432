"""Renders chat messages through the model's own chat template (GGUF metadata)."""

from __future__ import annotations

import importlib
from typing import Any

from lmsp_desktop.core.engines.base import EngineError
from lmsp_desktop.core.tools.prompt import render_inputs, template_takes_tools

# Used only when a GGUF file carries no tokenizer.chat_template: plain ChatML, which most
# small instruction-tuned models of the last years understand.
FALLBACK_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def normalise_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat templates know system/user/assistant; an OpenAI `developer` message is the newer
    name for a system message, so it is rendered as one."""
    out: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role", "user")
        if role == "developer":
            role = "system"
        out.append({**message, "role": role, "content": message.get("content") or ""})
    return out


class ChatRenderer:
    """Wraps llama_cpp's Jinja2ChatFormatter for one model's template."""

    def __init__(self, template: str | None, bos_token: str, eos_token: str) -> None:
        chat_format: Any = importlib.import_module("llama_cpp.llama_chat_format")
        self.template = template or FALLBACK_TEMPLATE
        self._formatter: Any = chat_format.Jinja2ChatFormatter(
            template=self.template,
            eos_token=eos_token,
            bos_token=bos_token,
            add_generation_prompt=True,
        )
        self.bos_token = bos_token
        # Tools go through the template when it takes them, else the generic prompt.
        self.native_tools = template_takes_tools(self.template)

    def render(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
    ) -> str:
        if not messages:
            raise EngineError("invalid_input", "The request has no messages to answer.")
        shown, template_tools = render_inputs(messages, tools, native=self.native_tools)
        try:
            response = self._formatter(messages=normalise_messages(shown), tools=template_tools)
        except Exception as exc:  # Jinja errors and the template's raise_exception()
            raise EngineError(
                "chat_template_error",
                f"The model's chat template rejected these messages ({exc}). "
                "Check the message roles and their order (many templates require "
                "user and assistant turns to alternate).",
            ) from exc
        return str(response.prompt)
