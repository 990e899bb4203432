"""The one internal task request: what every API's parser makes of its body.

It is a plain JSON-able dict, stored with the task (`tasks.request`) and read back by the
runner (what to generate), the token counter (does it fit), recovery and every renderer
(what to echo). Every parser builds it with `task_request()`, so each key below is present
whatever API the request came through, with the default an API without the field means.
"""

from __future__ import annotations

from typing import Any

from lmsp_desktop.core.tools.schema import unenforced_note

# Sampling defaults when a request leaves them out (llama.cpp's own defaults); the answer
# reports the values actually used.
DEFAULT_TEMPERATURE = 0.8
DEFAULT_TOP_P = 0.95

DEFAULTS: dict[str, Any] = {
    # Which API the request came through ("responses", "chat.completions", ...): the task
    # object and the app's Request tab show it; routes refuse another API's ids.
    "api": "responses",
    # The API and route as people know them, for the app's Request tab.
    "via": None,
    "model": "",
    # What the model sees: chat messages in the shared shape (role, content text; assistant
    # `tool_calls` as {call_id, name, arguments}; tool results as {role: tool, call_id}).
    "messages": [],
    # Responses only: the input items as sent (ids filled), and the chain they continue.
    "input_items": None,
    "previous_response_id": None,
    # Legacy completions: the text to continue as it is (no chat template; `messages` is
    # empty), and the text after the gap to fill (fill-in-the-middle).
    "prompt": None,
    "suffix": None,
    # A system text put before the messages (Responses `instructions`).
    "instructions": None,
    "temperature": DEFAULT_TEMPERATURE,
    "top_p": DEFAULT_TOP_P,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "max_output_tokens": None,
    "seed": None,
    # Seconds the model stays loaded once idle after this request (Ollama's keep_alive;
    # negative: until the service stops); None: the idle timeout in Settings.
    "keep_alive_s": None,
    # Sample among the k most likely tokens only (None: no limit).
    "top_k": None,
    # Generation ends before the first of these texts; none of it reaches the client.
    "stop": [],
    "stream": False,
    "background": False,
    # False: the answer cannot be retrieved or continued (the task still shows in the app).
    "store": True,
    "metadata": {},
    "truncation": "disabled",
    "on_restart": "fail",
    "user": None,
    # Echoed as sent: the service has no say in them.
    "prompt_cache_key": None,
    "safety_identifier": None,
    "reasoning": None,
    "include": None,
    "service_tier": "default",
    # Tools and output format (core/tools/fields.py fills them; the runner's plan reads them).
    "tools": [],
    "tool_choice": "auto",
    "allowed_tools": None,
    "parallel_tool_calls": False,
    "max_tool_calls": None,
    "dropped_tools": [],
    # Places of keywords a non-strict schema had that the output grammar does not enforce.
    "schema_notes": [],
    "text_format": {"type": "text"},
    # What the service did not do as asked (fields it does not use, settings it could not
    # apply), in sentences: the task object and the app show them.
    "notes": [],
}

_FIELDS = frozenset(DEFAULTS)


def task_request(own: dict[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
    """A task request: the defaults above, then `fields`, then `own`: the keys one API keeps
    for rendering its own answers (nothing else reads them). A field not listed above is a
    bug in the caller: a misspelt key would silently leave its default in force."""
    return request_of(fields, own)


def request_of(fields: dict[str, Any], own: dict[str, Any] | None = None) -> dict[str, Any]:
    """task_request with its fields given as one dict: what a parser on the hot create path
    calls (B1: ~40 keyword arguments were a dict built, unpacked into a call and built again
    by the callee, per create). `fields` is not changed."""
    # One C call over a frozenset first (B1: the key-by-key check in Python was a tenth of
    # parsing a create; dict_keys' set difference cost more still, a set built per call).
    if not _FIELDS.issuperset(fields) or (own and not _FIELDS.isdisjoint(own)):
        unknown = [k for k in fields if k not in DEFAULTS]
        shadowing = [k for k in own or {} if k in DEFAULTS]
        raise KeyError(f"not task request fields: {unknown}; own keys shadowing them: {shadowing}")
    request = {**DEFAULTS, **fields, **own} if own else {**DEFAULTS, **fields}
    if request["schema_notes"]:  # told on the task, as what else was not done as asked
        request["notes"] = [*request["notes"], unenforced_note(request["schema_notes"])]
    return request


def chat_messages(request: dict[str, Any]) -> list[dict[str, Any]]:
    """The messages the model sees: `instructions` first as a system message."""
    messages = list(request["messages"])
    if request.get("instructions"):
        messages.insert(0, {"role": "system", "content": request["instructions"]})
    return messages
