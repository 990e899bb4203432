"""Ollama's `truncate` (true unless false) on `/api/chat` and `/api/generate`: how an input
longer than the context is made to fit, as Ollama's server does it.

Ollama's chatPrompt (server/prompt.go) leaves out the oldest messages one at a time until the
prompt fits, never a system message nor the last message, and never a tool result without
the assistant's call it answers (its tool block goes whole). When the last message with the
system messages is still too long (a generate's prompt always is: it is the last message),
Ollama's runner keeps the end of the prompt's tokens. Here that cut is made in the last
message's text, its beginning left out: the model reads the end of the prompt as with Ollama,
and the chat template's framing (the system message, the role headers) stays whole where
Ollama's token cut keeps only the first `num_keep` (4) tokens of it.

A cut leaves room for the answer: Ollama's runner shifts its context as the output grows,
which the engine here does not, so a prompt cut to the whole context would leave no room to
answer at all.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lmsp_desktop.core.context_window import KEPT_ROLES, Messages


def output_room(request: dict[str, Any], limit: int) -> int:
    """Tokens a cut input leaves for the answer: the output limit asked for (`num_predict`),
    at most half the context; without one, half the context (what Ollama's context shift
    frees once its output reaches the context's end)."""
    half = limit // 2
    wanted = request.get("max_output_tokens")
    return min(wanted, half) if isinstance(wanted, int) and wanted > 0 else half


def shorten_like_ollama(
    messages: Messages, count: Callable[[Messages], int], limit: int, request: dict[str, Any]
) -> tuple[Messages, int]:
    """The messages the model is given (and their tokens) when `messages` do not fit `limit`:
    the oldest messages left out until the prompt leaves the answer its room (output_room),
    or at least fits; only when the system messages and the last message alone do not fit
    is the last message's beginning cut, to leave that room. The task's notes say what was
    left out."""
    before = count(messages)
    target = max(1, limit - output_room(request, limit))
    starts = sorted(
        {
            _block_start(messages, i)
            for i in range(len(messages))
            if messages[i].get("role") not in KEPT_ROLES or i == len(messages) - 1
        }
    )
    kept = _earliest(messages, starts, count, target) or _earliest(
        messages, starts, count, limit - 1
    )
    if kept is not None:
        shorter, counted = kept
        _note(request, before, limit, len(messages) - len(shorter), 0, counted)
        return shorter, counted
    last = _from(messages, starts[-1])
    cut = _cut_last(last, count, target)
    if cut is None:  # even without its text it does not fit: the refusal says so
        return last, count(last)
    shorter, left_out, counted = cut
    _note(request, before, limit, len(messages) - len(last), left_out, counted)
    return shorter, counted


def _earliest(
    messages: Messages, starts: list[int], count: Callable[[Messages], int], most: int
) -> tuple[Messages, int] | None:
    """The messages from the earliest of `starts` whose prompt takes at most `most` tokens,
    and its count (a binary search: fewer messages never take more tokens); None if none."""
    low, high = 0, len(starts) - 1
    best: tuple[Messages, int] | None = None
    while low <= high:
        mid = (low + high) // 2
        candidate = _from(messages, starts[mid])
        counted = count(candidate)
        if counted <= most:
            best, high = (candidate, counted), mid - 1
        else:
            low = mid + 1
    return best


def _block_start(messages: Messages, i: int) -> int:
    """Where the tool block holding message `i` starts: the assistant's message with the
    calls its tool results answer (Ollama's toolBlockStartIndex); `i` itself otherwise."""
    if messages[i].get("role") != "tool":
        return i
    start = i
    while start > 0 and messages[start - 1].get("role") == "tool":
        start -= 1
    call = messages[start - 1] if start > 0 else {}
    return start - 1 if call.get("role") == "assistant" and call.get("tool_calls") else i


def _from(messages: Messages, start: int) -> Messages:
    """The messages from `start` on, with the system messages before it."""
    return [m for j, m in enumerate(messages) if j >= start or m.get("role") in KEPT_ROLES]


def _cut_last(
    messages: Messages, count: Callable[[Messages], int], target: int
) -> tuple[Messages, int, int] | None:
    """The messages with the last one's text cut to its longest end whose prompt takes at
    most `target` tokens (a binary search over where the kept text starts, counted with the
    model's tokenizer), the characters left out and the count; None when even no text of it
    fits."""
    last = messages[-1]
    text = last.get("content")
    if not isinstance(text, str) or not text:
        return None

    def with_text(start: int) -> Messages:
        return [*messages[:-1], {**last, "content": text[start:]}]

    low, high = 1, len(text)
    found: tuple[int, int] | None = None
    while low <= high:
        mid = (low + high) // 2
        counted = count(with_text(mid))
        if counted <= target:
            found, high = (mid, counted), mid - 1
        else:
            low = mid + 1
    if found is None or found[0] == len(text):
        return None
    start, counted = found
    return with_text(start), start, counted


def _note(
    request: dict[str, Any], before: int, limit: int, dropped: int, cut: int, after: int
) -> None:
    what = []
    if dropped:
        what.append(f"its {dropped} oldest message{'s' if dropped > 1 else ''} left out")
    if cut:
        what.append(f"the first {cut} characters of its last message cut")
    note = (
        f"The input ({before} tokens) did not fit the model's context of {limit} tokens: "
        f"{' and '.join(what)}, so that {after} tokens were read (Ollama's `truncate`; "
        "send `truncate: false` to be refused instead)."
    )
    # A new list: the request's may be the defaults' own (core/api/task_request.py).
    request["notes"] = [*(request.get("notes") or []), note]
