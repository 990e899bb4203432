"""The legacy completions parser: `POST /v1/completions` bodies into the task request.

The prompt is continued as it is (no chat template); a `suffix` asks for the middle between
them (fill-in-the-middle, for models whose GGUF has FIM tokens). One prompt per request.
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
    fields.refuse(body, _REFUSED)
    stream, include_usage = fields.streaming(body)
    max_tokens = fields.optional_int(body, "max_tokens", 1, 1_000_000)
    return task_request(
        {
            "echo": fields.flag(body, "echo", False),
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


def _prompt(value: Any) -> str:
    """A string, or a list holding one string; batches and token arrays are refused."""
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], str):
        value = value[0]
    if isinstance(value, str):
        return value
    if isinstance(value, list) and len(value) > 1 and all(isinstance(p, str) for p in value):
        raise unsupported(
            "One prompt per request: send each prompt of the list as its own request.", "prompt"
        )
    raise invalid("`prompt` is required: a string (or a list holding one string).", "prompt")
