"""Stop sequences (Chat Completions `stop`): text is held back while it could still be the
start of a stop sequence, so a client never sees any part of one."""

from __future__ import annotations


class StopScanner:
    """Feeds generated text through; says when a stop sequence has appeared."""

    def __init__(self, stops: list[str], held: str = "") -> None:
        self.stops = [s for s in stops if s]
        self.held = held  # text not yet released: it may be the start of a stop sequence

    def feed(self, text: str) -> tuple[str, bool]:
        """(the text that may be released now, whether a stop sequence was reached). After a
        stop, the text from the stop sequence on is dropped."""
        buffer = self.held + text
        hits = [i for i in (buffer.find(s) for s in self.stops) if i >= 0]
        if hits:
            self.held = ""
            return buffer[: min(hits)], True
        keep = 0
        for stop in self.stops:
            for n in range(min(len(stop) - 1, len(buffer)), keep, -1):
                if buffer.endswith(stop[:n]):
                    keep = n
                    break
        self.held = buffer[len(buffer) - keep :] if keep else ""
        return buffer[: len(buffer) - keep], False

    def flush(self) -> str:
        """The held text at the end of a generation that met no stop sequence."""
        held, self.held = self.held, ""
        return held
