"""Stop sequences (Chat Completions `stop`): text is held back while it could still be the
start of a stop sequence, so a client never sees any part of one."""

from __future__ import annotations


class StopScanner:
    """Feeds generated text through; says when a stop sequence has appeared."""

    def __init__(self, stops: list[str], held: str = "") -> None:
        self.stops = [s for s in stops if s]
        self.held = held  # text not yet released: it may be the start of a stop sequence
        self.matched: str | None = None  # the stop sequence that ended the text, once one has

    def feed(self, text: str) -> tuple[str, bool]:
        """(the text that may be released now, whether a stop sequence was reached). After a
        stop, the text from the stop sequence on is dropped; `matched` names the sequence (the
        earliest in the text; of two at the same place, the first listed)."""
        buffer = self.held + text
        hits = [(i, stop) for stop in self.stops if (i := buffer.find(stop)) >= 0]
        if hits:
            at, self.matched = min(hits, key=lambda hit: hit[0])
            self.held = ""
            return buffer[:at], True
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
