"""Field parsers every API's parser shares: each error names the field as the client sent it."""

from __future__ import annotations

from typing import Any

from lmsp_desktop.core.errors import LmspError, invalid
from lmsp_desktop.core.states import RestartPolicy

TEXT_PARTS = ("input_text", "output_text", "text")
MAX_STOPS = 4  # OpenAI's limit on `stop` sequences
RESTART_POLICIES = frozenset(p.value for p in RestartPolicy)  # not rebuilt per request (B1)

# Fields a client may send that the models here cannot honour: for each, the values that
# would be accepted (None: leave it out) and why others are refused.
Refused = dict[str, tuple[tuple[Any, ...], str]]


def unsupported(message: str, param: str) -> LmspError:
    return LmspError(message, code="unsupported_parameter", param=param, status=400)


def refuse(body: dict[str, Any], refused: Refused) -> None:
    """A 400 naming the first field of `refused` the body sends with a value not accepted."""
    for name, (accepted, why) in refused.items():
        if body.get(name) not in accepted:
            raise unsupported(f"{why} Leave `{name}` out.", name)


def streaming(body: dict[str, Any]) -> tuple[bool, bool]:
    """`stream`, and `stream_options.include_usage` (the options only with `stream: true`),
    as OpenAI's Chat Completions and completions read them."""
    stream = flag(body, "stream", False)
    options = body.get("stream_options")
    if options is not None and (not isinstance(options, dict) or not stream):
        raise invalid(
            "`stream_options` is an object and only allowed with `stream: true`.",
            "stream_options",
        )
    return stream, flag(options or {}, "include_usage", False)


def stop(value: Any) -> list[str]:
    """OpenAI's `stop`: a string or a list of up to 4 strings."""
    if value is None:
        return []
    stops = [value] if isinstance(value, str) else value
    if (
        not isinstance(stops, list)
        or len(stops) > MAX_STOPS
        or not all(isinstance(s, str) and s for s in stops)
    ):
        raise invalid("`stop` must be a non-empty string or a list of up to 4 of them.", "stop")
    return list(stops)


def content_text(content: Any, where: str) -> str:
    """A message's content as one string: a string, or a list of text parts joined."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise invalid(
            f"{where}.content must be a string or a list of text parts.", f"{where}.content"
        )
    texts = []
    for j, part in enumerate(content):
        at = f"{where}.content[{j}]"
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise invalid(f"{at} must be an object with a `type`.", at)
        if part["type"] not in TEXT_PARTS:
            raise unsupported(
                f"{at} is {part['type']!r}, but the models here read text only. "
                "Send the content as text.",
                f"{at}.type",
            )
        text = part.get("text")
        if not isinstance(text, str):
            raise invalid(f"{at}.text must be a string.", f"{at}.text")
        texts.append(text)
    return "".join(texts)


def number(body: dict[str, Any], name: str, default: float, lo: float, hi: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not lo <= value <= hi:
        raise invalid(f"`{name}` must be a number from {lo} to {hi}.", name)
    return float(value)


def optional_int(body: dict[str, Any], name: str, lo: int, hi: int) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # JSON has one number type: 16.0 is the whole number 16
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise invalid(f"`{name}` must be a whole number from {lo} to {hi}.", name)
    return value


def flag(body: dict[str, Any], name: str, default: bool) -> bool:
    value = body.get(name, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise invalid(f"`{name}` must be true or false.", name)
    return value


def optional_str(body: dict[str, Any], name: str, max_len: int = 512) -> str | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > max_len:
        raise invalid(f"`{name}` must be a string of at most {max_len} characters.", name)
    return value


def metadata(body: dict[str, Any]) -> dict[str, str]:
    value = body.get("metadata")
    if value is None:
        return {}
    if (
        not isinstance(value, dict)
        or len(value) > 16
        or not all(
            isinstance(k, str) and isinstance(v, str) and len(k) <= 64 and len(v) <= 512
            for k, v in value.items()
        )
    ):
        raise invalid("`metadata` must map up to 16 short strings to strings.", "metadata")
    return value


def on_restart(body: dict[str, Any], default: str) -> str:
    value = body.get("on_restart", default)
    if not isinstance(value, str) or value not in RESTART_POLICIES:
        raise invalid("`on_restart` must be fail, retry or resume.", "on_restart")
    return value


def kind(value: Any) -> str:
    """A JSON value's type as the client wrote it (a number, an array…), for an error."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return "null" if value is None else "a string"


def model(body: dict[str, Any]) -> str:
    value = body.get("model")
    if not isinstance(value, str) or not value:
        # Sent, but not a string: "required" sent the user looking for a missing field.
        what = "is required" if value in (None, "") else f"must be a string, not {kind(value)}"
        raise invalid(f"`model` {what}: the id of a model from GET /v1/models.", "model")
    return value


def echoed(body: dict[str, Any]) -> dict[str, Any]:
    """Fields the service has no say in, kept as sent so the answer can echo them."""
    reasoning = body.get("reasoning")
    if reasoning is not None and not isinstance(reasoning, dict):
        raise invalid('`reasoning` must be an object such as {"effort": "low"}.', "reasoning")
    include = body.get("include")
    if include is not None and (
        not isinstance(include, list) or not all(isinstance(i, str) for i in include)
    ):
        raise invalid("`include` must be a list of strings.", "include")
    tier = body.get("service_tier")
    if tier is not None and tier not in ("auto", "default", "flex", "scale", "priority"):
        raise invalid(
            "`service_tier` must be auto, default, flex, scale or priority.", "service_tier"
        )
    return {
        "prompt_cache_key": optional_str(body, "prompt_cache_key", 1024),
        "safety_identifier": optional_str(body, "safety_identifier", 1024),
        "reasoning": reasoning,
        "include": include,
        # Local models have one tier: the answer reports the tier used.
        "service_tier": "default",
    }
