"""Renders chat messages through the model's own chat template (GGUF metadata)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import jinja2
import jinja2.ext
import jinja2.sandbox

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


# A final assistant message with this key set is a prefill (Anthropic's, Ollama's /api/chat):
# the answer continues its text instead of starting a new turn. Set by those APIs' parsers
# (core/api/anthropic/request.py, core/api/ollama/request.py); Chat Completions and Responses
# have no prefill, and their final assistant message stays a finished turn.
PREFILL = "prefill"


def normalise_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat templates know system/user/assistant; an OpenAI `developer` message is the newer
    name for a system message, so it is rendered as one."""
    out: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role", "user")
        if role == "developer":
            role = "system"
        shown = {k: v for k, v in message.items() if k != PREFILL}
        out.append({**shown, "role": role, "content": message.get("content") or ""})
    return out


def prefill_of(messages: list[dict[str, Any]]) -> str | None:
    """The text a final assistant prefill holds (None: no prefill; "" an empty one)."""
    last = messages[-1] if messages else {}
    if last.get("role") != "assistant" or not last.get(PREFILL):
        return None
    content = last.get("content")
    return content if isinstance(content, str) else ""


def open_last_turn(rendered: str, text: str, start: int = 0) -> str | None:
    """The rendered conversation cut just after the final assistant message's text: what
    follows it (the end-of-turn, a newline, another turn's opening) removed, so that the
    model goes on writing it. None when the template did not print the text as it is (after
    `start`, where the earlier turns end).

    As Transformers' `continue_final_message`: the text is looked for from the end, and a
    template that trims the message (Llama 3's `| trim`) leaves its trailing space out."""
    stripped = text.strip()
    at = rendered.rfind(stripped, start)
    if not stripped or at < 0:
        return None
    kept = text.lstrip()
    if rendered[at : at + len(kept)] == kept:
        return rendered[: at + len(kept)]
    return rendered[: at + len(stripped)]


class _IgnoreGenerationTags(jinja2.ext.Extension):
    """Hugging Face's `{% generation %}` chat-template tag, rendered as its content."""

    tags = {"generation"}  # noqa: RUF012 (jinja2 declares it so)

    def parse(self, parser: Any) -> Any:
        parser.stream.skip(1)
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


def _tojson(
    x: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    # Transformers' chat-template `tojson` (non-ASCII kept as it is), not Jinja's.
    return json.dumps(
        x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _raise_exception(message: str) -> None:
    raise ValueError(message)


def _strftime_now(f: str) -> str:
    return datetime.now().strftime(f)


def chat_environment() -> jinja2.Environment:
    """The Jinja environment chat templates are parsed and rendered in, as llama-cpp-python's
    Jinja2ChatFormatter (0.3.x) sets it up: sandboxed, Transformers' extensions (the
    `{% generation %}` tag, `{% break %}` / `{% continue %}`) and `tojson`."""
    environment = jinja2.sandbox.ImmutableSandboxedEnvironment(
        loader=jinja2.BaseLoader(),
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[_IgnoreGenerationTags, jinja2.ext.loopcontrols],
    )
    environment.filters["tojson"] = _tojson
    return environment


class ChatRenderer:
    """One model's chat template, rendered as llama-cpp-python's Jinja2ChatFormatter
    (0.3.x) renders it: the same sandboxed environment, extensions, filters and variables.
    Its own copy, so that counting a prompt's tokens in the service (context_window.py)
    does not import llama_cpp's chat formats, which import numpy and the whole package."""

    def __init__(self, template: str | None, bos_token: str, eos_token: str) -> None:
        self.template = template or FALLBACK_TEMPLATE
        environment = chat_environment()
        self._compiled = environment.from_string(self.template)
        self.eos_token = eos_token
        self.bos_token = bos_token
        # Tools go through the template when it takes them, else the generic prompt: read
        # in the environment it renders in (a plain one cannot parse Transformers' tags).
        self.native_tools = template_takes_tools(self.template, environment)

    def render(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
    ) -> str:
        """The prompt: the conversation, then the opening of the assistant's turn; with a
        final assistant prefill (PREFILL), that turn as the template prints it, left open
        after its text (no generation prompt, its end-of-turn cut off), so the model
        continues it; an empty prefill opens the turn as usual."""
        if not messages:
            raise EngineError("invalid_input", "The request has no messages to answer.")
        shown, template_tools = render_inputs(messages, tools, native=self.native_tools)
        prefill = prefill_of(shown)
        if prefill is None:
            return self._render(shown, template_tools, True)
        if not prefill.strip():
            return self._render(shown[:-1], template_tools, True)
        whole = self._render(shown, template_tools, False)
        # The text is looked for in the last turn only: an earlier turn may hold the same
        # words when the template rewrites the last one.
        earlier = self._render(shown[:-1], template_tools, False)
        opened = open_last_turn(whole, prefill, len(earlier) if whole.startswith(earlier) else 0)
        if opened is not None:
            return opened
        # A template that does not print the text as it is (it rewrites assistant turns):
        # the turn's usual opening, then the text.
        return self._render(shown[:-1], template_tools, True) + prefill

    def _render(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        generation_prompt: bool,
    ) -> str:
        try:
            return self._compiled.render(
                messages=normalise_messages(messages),
                eos_token=self.eos_token,
                bos_token=self.bos_token,
                raise_exception=_raise_exception,
                add_generation_prompt=generation_prompt,
                functions=None,
                function_call=None,
                tools=tools,
                tool_choice=None,
                strftime_now=_strftime_now,
            )
        except Exception as exc:  # Jinja errors and the template's raise_exception()
            raise EngineError(
                "chat_template_error",
                f"The model's chat template rejected these messages ({exc}). "
                "Check the message roles and their order (many templates require "
                "user and assistant turns to alternate).",
            ) from exc
