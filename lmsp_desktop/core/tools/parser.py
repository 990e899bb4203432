"""Turns the model's text, delta by delta, into plain text and function calls.

Calls are `<tool_call>{"name": …, "arguments": {…}}</tool_call>` blocks (prompt.py). Text that
might be the start of a block is held back until it is clear; a call is announced as soon as
its name is known and its arguments are streamed as they are generated. The parser's state
is a function of all the text fed so far, however it was split, so a resumed task rebuilds
it by feeding the text of the interrupted run once (`feed` and drop the events).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from lmsp_desktop.core.tools.prompt import CLOSE, OPEN

# Everything between `<tool_call>` and the first character of the arguments' JSON value.
_HEADER = re.compile(
    r'\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.){1,128})"\s*,\s*"(?:arguments|parameters)"\s*:\s*'
)
# A header still unmatched after this many characters is not a call: it is shown as text.
_HEADER_LIMIT = 256


@dataclass(frozen=True)
class TextDelta:
    text: str


@dataclass(frozen=True)
class CallStarted:
    index: int  # 0-based among this output's calls
    name: str
    # The `namespace` the called function was offered in (set by the caller, not parsed).
    namespace: str | None = None


@dataclass(frozen=True)
class ArgumentsDelta:
    index: int
    delta: str


@dataclass(frozen=True)
class CallDone:
    index: int
    name: str
    arguments: str


Event = TextDelta | CallStarted | ArgumentsDelta | CallDone


class ToolCallParser:
    """Incremental parser of one output. `feed` text deltas, then `finish` once at the end."""

    def __init__(self) -> None:
        self._buffer = ""
        self._state = "text"  # text | header | arguments | tail
        self.calls = 0  # calls started so far
        self._name = ""
        self._arguments: list[str] = []
        self._depth = 0
        self._in_string = False
        self._escaped = False
        self._started = False
        self._spoken = False  # any text shown yet (whitespace before a call is not)
        self._pending_space = ""

    @property
    def in_call(self) -> bool:
        return self._state in ("header", "arguments", "tail") and self._name != ""

    @property
    def ends_in_complete_call(self) -> bool:
        """The output so far ends with a call whose arguments are whole JSON (its closing tag
        may be still to come) and nothing after it: cut there, it is a call to run."""
        if self._state == "tail":
            return True
        return (
            self._state == "text"
            and self.calls > 0
            and not self._spoken
            and not self._buffer.strip()
        )

    def feed(self, text: str) -> list[Event]:
        self._buffer += text
        events: list[Event] = []
        while True:
            before = (self._state, len(self._buffer))
            step = {
                "text": self._in_text,
                "header": self._in_header,
                "arguments": self._in_arguments,
                "tail": self._in_tail,
            }[self._state]
            events.extend(step())
            if (self._state, len(self._buffer)) == before:
                return events

    def finish(self) -> list[Event]:
        """Flush at the end of the output: held text is text, an open call is closed."""
        events: list[Event] = []
        if self._state == "text":
            events.extend(self._say(self._buffer, final=True))
        elif self._state == "header":
            events.extend(self._say(OPEN + self._buffer, final=True))
        else:
            if self._state == "arguments" and self._buffer:
                events.extend(self._take_arguments(len(self._buffer)))
            events.append(self._done())
        self._buffer = ""
        self._state = "text"
        return events

    # -- states ----------------------------------------------------------------------------
    def _in_text(self) -> list[Event]:
        at = self._buffer.find(OPEN)
        if at >= 0:
            events = self._say(self._buffer[:at], before_call=True)
            self._buffer = self._buffer[at + len(OPEN) :]
            self._state = "header"
            return events
        hold = _partial_suffix(self._buffer, OPEN)
        cut = len(self._buffer) - hold
        shown, self._buffer = self._buffer[:cut], self._buffer[cut:]
        return self._say(shown)

    def _in_header(self) -> list[Event]:
        match = _HEADER.match(self._buffer)
        if match is None:
            if len(self._buffer) > _HEADER_LIMIT or CLOSE in self._buffer:
                text, self._buffer = OPEN + self._buffer, ""
                self._state = "text"
                return self._say(text)
            return []
        try:
            self._name = json.loads(f'"{match.group(1)}"')
        except json.JSONDecodeError:
            self._name = match.group(1)
        self._buffer = self._buffer[match.end() :]
        self._state = "arguments"
        self._arguments = []
        self._depth, self._in_string, self._escaped, self._started = 0, False, False, False
        self.calls += 1
        return [CallStarted(self.calls - 1, self._name)]

    def _in_arguments(self) -> list[Event]:
        end = None
        for i, char in enumerate(self._buffer):
            if not self._started:
                if char.isspace():
                    continue
                self._started = True
            if self._in_string:
                if self._escaped:
                    self._escaped = False
                elif char == "\\":
                    self._escaped = True
                elif char == '"':
                    self._in_string = False
            elif char == '"':
                self._in_string = True
            elif char in "{[":
                self._depth += 1
            elif char in "}]":
                self._depth -= 1
                if self._depth <= 0:
                    end = i + 1
                    break
        if end is None:
            return self._take_arguments(len(self._buffer))
        events = self._take_arguments(end)
        self._state = "tail"
        return events

    def _in_tail(self) -> list[Event]:
        at = self._buffer.find(CLOSE)
        if at < 0:
            return []
        self._buffer = self._buffer[at + len(CLOSE) :]
        self._state = "text"
        return [self._done()]

    # -- helpers ---------------------------------------------------------------------------
    def _take_arguments(self, count: int) -> list[Event]:
        chunk, self._buffer = self._buffer[:count], self._buffer[count:]
        if not self._arguments:
            chunk = chunk.lstrip()
        if not chunk:
            return []
        self._arguments.append(chunk)
        return [ArgumentsDelta(self.calls - 1, chunk)]

    def _done(self) -> CallDone:
        done = CallDone(self.calls - 1, self._name, "".join(self._arguments).strip() or "{}")
        self._name, self._arguments = "", []
        self._spoken = False  # whitespace between calls and after the last one is dropped
        self._pending_space = ""
        return done

    def _say(self, text: str, *, before_call: bool = False, final: bool = False) -> list[Event]:
        """Text to show. Trailing whitespace is held until words follow (then shown with
        them) and dropped when a call follows, so the result does not depend on how the text
        was split; whitespace right after a call is dropped too."""
        if final:
            body, trail = text, ""
            if self.calls and not self._spoken:
                body = body.strip() and body  # only whitespace after the last call: drop it
        else:
            body = text.rstrip()
            trail = text[len(body) :]
        if before_call:
            trail = ""
        if not body:
            self._pending_space = "" if before_call else self._pending_space + trail
            if final and self._pending_space and (self.calls == 0 or self._spoken):
                space, self._pending_space = self._pending_space, ""
                return [TextDelta(space)]
            return []
        shown = self._pending_space + body
        if self.calls and not self._spoken:
            shown = shown.lstrip()
        self._pending_space = trail
        if not shown:
            return []
        self._spoken = True
        return [TextDelta(shown)]


def _partial_suffix(text: str, tag: str) -> int:
    """Length of the longest end of `text` that is a proper start of `tag`."""
    for size in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:size]):
            return size
    return 0
