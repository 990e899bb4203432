"""The legacy completions parser: `POST /v1/completions` bodies into the task request.

The prompt is continued as it is (no chat template); a `suffix` asks for the middle between
them (fill-in-the-middle, for models whose GGUF has FIM tokens). A prompt is text or token
ids; a request with several prompts, or `n` > 1, asks for several choices: choice_bodies
splits it into one body per choice, each a task of its own (choices.py).
"""

from __future__ import annotations

from typing import Any

from lmsp_desktop.core.api import fields
from lmsp_desktop.core.api.task_request import DEFAULT_TEMPERATURE, DEFAULT_TOP_P, task_request
from lmsp_desktop.core.errors import invalid

COMPLETIONS_API = "completions"
# OpenAI's default for this API: a short continuation, as editors ask for.
DEFAULT_MAX_TOKENS = 16
# The most choices (prompts × n) one request may ask for: each is a task. OpenAI's own
# bound on `n`.
MAX_CHOICES = 128
_REFUSED: fields.Refused = {
    "logprobs": ((None, 0), "This service does not return log probabilities."),
    "logit_bias": ((None, {}), "Logit bias is not supported."),
    "best_of": ((None, 1), "Only one candidate per request is generated."),
    # Several choices are split into one body each before parsing (choice_bodies).
    "n": ((None, 1), "`n` asks for several choices: each is a body of its own."),
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


PROMPT_HELP = "a string, an array of token ids, or a list of those (one choice per prompt)"


def _is_token(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_tokens(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(_is_token(t) for t in value)


def prompts_of(value: Any) -> list[str | list[int]] | None:
    """The prompts of a `prompt` field, as OpenAI takes it: a string, an array of token ids
    (continued as they are), or a list of those (several prompts); None when it is none of
    these (the parse then says what `prompt` takes)."""
    if isinstance(value, str):
        return [value]
    if _is_tokens(value):
        return [[int(t) for t in value]]
    if (
        isinstance(value, list)
        and value
        and all(isinstance(p, str) or _is_tokens(p) for p in value)
    ):
        return [p if isinstance(p, str) else [int(t) for t in p] for p in value]
    return None


def choice_bodies(body: Any) -> list[dict[str, Any]] | None:
    """One body per choice of a request asking for several (several prompts, or `n` > 1),
    in OpenAI's `index` order (prompt × n + j), each with one prompt and no `n`; None for a
    request of one choice, answered as its body stands. With a `seed`, choice j of a prompt
    takes seed + j, so that the n choices differ and each can be had again."""
    if not isinstance(body, dict):
        return None
    prompts = prompts_of(body.get("prompt"))
    n = fields.optional_int(body, "n", 1, MAX_CHOICES) or 1
    if prompts is None or (len(prompts) == 1 and n == 1):
        return None  # one choice, or a `prompt` the parse refuses with its own words
    if len(prompts) * n > MAX_CHOICES:
        raise invalid(
            f"This request asks for {len(prompts)} prompts × n {n} = {len(prompts) * n} "
            f"choices; at most {MAX_CHOICES} are answered at once: send fewer prompts per "
            "request.",
            "prompt",
        )
    seed = body.get("seed")
    bodies = []
    for prompt in prompts:
        for j in range(n):
            one = {k: v for k, v in body.items() if k != "n"}
            one["prompt"] = prompt
            if j and isinstance(seed, int) and not isinstance(seed, bool):
                one["seed"] = (seed + j + 2**63) % 2**64 - 2**63  # within int64, as parsed
            bodies.append(one)
    return bodies


def _prompt(value: Any) -> str | list[int]:
    """The one prompt of a choice's body (choice_bodies split several)."""
    prompts = prompts_of(value)
    if prompts is not None and len(prompts) == 1:
        return prompts[0]
    raise invalid(f"`prompt` is required: {PROMPT_HELP}.", "prompt")
