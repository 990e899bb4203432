"""A running task's output when its request offers tools: the generated text goes through
the tool-call parser, and the parsed text and calls into the store (storage/output_items.py).

The snapshot keeps the text generated so far, so a resumed run rebuilds the parser's state
by feeding it once (the events it produced were committed with that snapshot).
"""

from __future__ import annotations

from typing import Any

from lmsp_desktop.core.engines.base import FinishReason
from lmsp_desktop.core.storage.tasks import TaskStore
from lmsp_desktop.core.tools.parser import CallStarted, Event, TextDelta, ToolCallParser


class CallingOutput:
    """Feeds one task's text deltas through a ToolCallParser into TaskStore.append_output."""

    def __init__(
        self,
        tasks: TaskStore,
        task_id: str,
        resumed_text: str = "",
        limit: int | None = None,
        namespaces: dict[str, str] | None = None,
    ) -> None:
        self.tasks = tasks
        self.task_id = task_id
        self.text = resumed_text
        # Calls past `limit` (parallel_tool_calls false, max_tool_calls) are dropped: without
        # a grammar (auto with non-strict tools) nothing else stops the model making them.
        self.limit = limit
        self.namespaces = namespaces or {}  # function name → the namespace it came in
        self.parser = ToolCallParser()
        self.parser.feed(resumed_text)  # replay: these events were persisted by the first run

    def _kept(self, events: list[Event]) -> list[Event]:
        if self.limit is not None:
            events = [e for e in events if isinstance(e, TextDelta) or e.index < self.limit]
        return [
            CallStarted(e.index, e.name, self.namespaces.get(e.name))
            if isinstance(e, CallStarted)
            else e
            for e in events
        ]

    async def write(
        self, deltas: list[str], *, output_tokens: int, input_tokens: int, snapshot: dict[str, Any]
    ) -> bool:
        """Persist the parsed deltas; False when the task is no longer running. Each token's
        text is parsed on its own, so a call's arguments stream a delta per token like text
        does, however many tokens one commit holds."""
        parsed = [event for delta in deltas for event in self.parser.feed(delta)]
        self.text += "".join(deltas)
        return await self.tasks.append_output(
            self.task_id,
            self._kept(parsed),
            output_tokens=output_tokens,
            input_tokens=input_tokens,
            snapshot={**snapshot, "text": self.text},
        )

    def finish_reason(self, engine_reason: FinishReason) -> FinishReason:
        """How the output ended: a budget (or the context) that ran out just as a call was
        complete ended a tool call, not an answer cut short (forced calls: the grammar
        allows nothing after it), so the task completes and clients get the call to run."""
        if engine_reason in ("length", "context") and self.parser.ends_in_complete_call:
            return "stop"
        return engine_reason

    async def close(self, finish_reason: str, *, output_tokens: int, input_tokens: int) -> bool:
        """Flush at the end of the output: held text, a call whose block never closed
        (complete if the model ended its turn, else incomplete)."""
        events = self._kept(self.parser.finish())
        if not events:
            return True
        return await self.tasks.append_output(
            self.task_id,
            events,
            output_tokens=output_tokens,
            input_tokens=input_tokens,
            snapshot=None,
            closing_status="completed" if finish_reason == "stop" else "incomplete",
        )
