"""The legacy completions parser: `POST /v1/completions` bodies into the task request.

The prompt is continued as it is (no chat template); a `suffix` asks for the middle between
them (fill-in-the-middle, for models whose GGUF has FIM tokens). One prompt per request,
as text or as token ids.
"""

from __future__ import annotations

from typing import Any

from lmsp_desktop.core.api import fields
from lmsp_desktop.core.api.fields import unsupported
from lmsp_desktop.core.api.task_request import DEFAULT_TEMPERATURE, DEFAULT_TOP_P, task_request
from lmsp_desktop.core.errors import invalid

COMPLETIONS_API = "completions"
# OpenAI's default for this API: a short continuation, as editors ask for.
DEFAULT_MAX_TOKENS = 16
_REFUSED: fields.Refused = {
    "logprobs": ((None, 0), "This service does not return log probabilities."),
    "logit_bias": ((None, {}), "Logit bias is not supported."),
    "best_of": ((None, 1), "Only one candidate per request is generated."),
    "n": ((None, 1), "Only one choice per request is supported."),
}


def parse_completion(body: Any, default_on_restart: str) -> dict[str, Any]:
    """The task request of a completions body (unknown fields are ignored, as OpenAI's)."""
    if not isinstance(body, dict):
        raise invalid("The request body must be a JSON object.", None, "invalid_json")
    model = fields.model(body)
    prompt = _prompt(body.get("prompt"))
    suffix = body.get("suffix")
    if suffix is not None and not isinstance(suffix, str):
        raise invalid("`suffix` must be a string.", "suffix")
    echo = fields.flag(body, "echo", False)
    if not isinstance(prompt, str) and (suffix or echo):
        # Both need the prompt's text: the middle is put between texts, and the echo is one.
        raise invalid(
            f"`{'suffix' if suffix else 'echo'}` needs the prompt as text; send `prompt` as "
            "a string, or leave it out.",
            "suffix" if suffix else "echo",
        )
    fields.refuse(body, _REFUSED)
    stream, include_usage = fields.streaming(body)
    max_tokens = fields.optional_int(body, "max_tokens", 1, 1_000_000)
    return task_request(
        {
            "echo": echo,
            "stream_options": {"include_usage": include_usage},
        },
        api=COMPLETIONS_API,
        via="Completions (POST /v1/completions)",
        model=model,
        prompt=prompt,
        suffix=suffix or None,
        temperature=fields.number(body, "temperature", DEFAULT_TEMPERATURE, 0.0, 2.0),
        top_p=fields.number(body, "top_p", DEFAULT_TOP_P, 0.0, 1.0),
        presence_penalty=fields.number(body, "presence_penalty", 0.0, -2.0, 2.0),
        frequency_penalty=fields.number(body, "frequency_penalty", 0.0, -2.0, 2.0),
        max_output_tokens=DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens,
        seed=fields.optional_int(body, "seed", -(2**63), 2**63 - 1),
        stop=fields.stop(body.get("stop")),
        stream=stream,
        on_restart=fields.on_restart(body, default_on_restart),
        user=fields.optional_str(body, "user"),
    )


PROMPT_HELP = "a string or an array of token ids (or a list holding one of those)"


def _is_token(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _prompt(value: Any) -> str | list[int]:
    """One prompt, as OpenAI takes it: a string, an array of token ids (continued as they
    are), or a list holding one of those. Several prompts are refused: one per request."""
    if isinstance(value, list) and value and all(_is_token(t) for t in value):
        return [int(t) for t in value]
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
        if isinstance(value, list) and value and all(_is_token(t) for t in value):
            return [int(t) for t in value]
    if isinstance(value, str):
        return value
    if (
        isinstance(value, list)
        and len(value) > 1
        and all(isinstance(p, str) or (isinstance(p, list) and p) for p in value)
    ):
        raise unsupported(
            f"`prompt` holds {len(value)} prompts; this service answers one prompt per "
            "request: send each prompt as its own request (they run side by side).",
            "prompt",
        )
    raise invalid(f"`prompt` is required: {PROMPT_HELP}.", "prompt")
