"""An engine worker's last tokens come with its end (B2): they ride inside its `done`
message, so the runner gets them together with the result and commits them with the task's
finish. A real worker process with the demo model cut to 4 blocks (nothing here depends on
the model's tokens)."""

from __future__ import annotations

from typing import Any

import pytest

from lmsp_desktop.core.engines.base import (
    EndingSink,
    GenerationRequest,
    GenerationResult,
    TokenPiece,
)
from lmsp_desktop.core.engines.worker import WorkerEngine
from lmsp_desktop.core.engines.worker.client import WorkerModel
from tests.support.cut_model import cut_demo_model

PROMPT = [{"role": "user", "content": "Write a long story about a lighthouse keeper."}]
TOKENS = 16


async def test_the_workers_last_tokens_come_with_its_result(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # What the worker process sent, message by message (kind, tokens carried): the service
    # may read a `tokens` message and the `done` after it in one read and hand them over
    # together, so only the messages themselves show where the last tokens rode.
    sent: list[tuple[str, int]] = []
    dispatch = WorkerModel._dispatch

    def recording(self: WorkerModel, message: tuple[Any, ...]) -> None:
        if message[0] == "tokens":
            sent.append(("tokens", len(message[2])))
        elif message[0] == "done":
            sent.append(("done", len(message[4])))
        dispatch(self, message)

    monkeypatch.setattr(WorkerModel, "_dispatch", recording)
    model = await WorkerEngine(n_threads=1).load(cut_demo_model())
    try:
        each: list[list[TokenPiece]] = []
        ends: list[tuple[list[TokenPiece], GenerationResult]] = []

        async def sink(pieces: list[TokenPiece]) -> bool:
            each.append(pieces)
            return True

        async def last(pieces: list[TokenPiece], result: GenerationResult) -> bool:
            ends.append((pieces, result))
            return True

        # An hour between hand-overs: the first goes at once (never held back: one token, or
        # two when the machine is busy and the worker's loop wakes late), the others wait for
        # the end, which cuts the wait short.
        request = GenerationRequest(
            PROMPT, max_output_tokens=TOKENS, temperature=0, sink_interval=3600.0
        )
        result = await model.generate(request, EndingSink(sink, last))
    finally:
        await model.unload()
    assert result.finish_reason == "length"
    assert result.output_tokens == TOKENS
    assert len(ends) == 1
    pieces, told = ends[0]
    assert told == result
    # Every token handed over once, the last ones with the end itself; before it at most the
    # first hand-over (none when the service's loop was late and read the worker's two
    # messages in one go).
    assert len(each) <= 1, [len(batch) for batch in each]
    assert sum(map(len, each)) + len(pieces) == TOKENS
    assert pieces, [len(batch) for batch in each]
    # What the worker sent: its first hand-over as tokens (none if its own loop woke only at
    # the end), every other token inside its done, never a tokens message of the last ones.
    assert [kind for kind, _ in sent] in (["tokens", "done"], ["done"]), sent
    assert sum(count for _, count in sent) == TOKENS, sent
    assert sent[-1][1] > 0, sent
