"""How far a prompt has been read reaches the loop at most a few times a second, never once
per chunk of a fast engine (pump.ReportThrottle on the channel): the first report (the
prompt's length and cached part) at once, then the newest figure once an interval has
passed; nothing once the generation has ended."""

from __future__ import annotations

import asyncio
import threading

from lmsp_desktop.core.engines.base import PromptProgress
from lmsp_desktop.core.engines.pump import (
    PROMPT_REPORT_INTERVAL_S,
    ReportThrottle,
    TokenChannel,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def channel_with_clock(told: list[PromptProgress]) -> tuple[TokenChannel, Clock]:
    channel = TokenChannel(asyncio.get_running_loop(), threading.Event(), told.append)
    clock = Clock()
    channel.prompt_throttle = ReportThrottle(PROMPT_REPORT_INTERVAL_S, clock)
    return channel, clock


async def test_fast_chunks_are_told_a_few_times_a_second_with_the_newest_figure() -> None:
    told: list[PromptProgress] = []
    channel, clock = channel_with_clock(told)

    def read() -> None:  # the decoding thread: a GPU's 64-token chunks, 1/64 s apart
        for chunk in range(1, 101):
            channel.report_prompt(PromptProgress(6400, 0, 64 * chunk))
            clock.now += 1 / 64  # exact in binary: the interval's edges fall on chunks

    await asyncio.to_thread(read)
    await asyncio.sleep(0)  # the loop runs what the thread handed over

    # 100 chunks over 1.56 s: the first, then one per 0.25 s (16 chunks), not one per chunk.
    assert [p.processed for p in told] == [64 * chunk for chunk in (1, 17, 33, 49, 65, 81, 97)]
    assert len(told) <= 100 / 64 / PROMPT_REPORT_INTERVAL_S + 1


async def test_slow_chunks_are_each_told() -> None:
    told: list[PromptProgress] = []
    channel, clock = channel_with_clock(told)

    def read() -> None:  # a CPU's 512-token chunks, seconds apart: each one is news
        channel.report_prompt(PromptProgress(2048, 100, 100))
        for done in (612, 1124, 1636):
            clock.now += 3.0
            channel.report_prompt(PromptProgress(2048, 100, done))

    await asyncio.to_thread(read)
    await asyncio.sleep(0)
    assert told == [
        PromptProgress(2048, 100, 100),
        PromptProgress(2048, 100, 612),
        PromptProgress(2048, 100, 1124),
        PromptProgress(2048, 100, 1636),
    ]


async def test_nothing_is_told_after_the_generation_ended() -> None:
    told: list[PromptProgress] = []
    channel, _clock = channel_with_clock(told)
    channel.close()
    channel.deliver_prompt(PromptProgress(10, 0, 4))  # a worker's message that came late
    assert told == []


async def test_the_reads_beginning_is_told_whatever_the_throttle() -> None:
    """A prompt admitted (waiting for its turn) whose read begins a moment later: that it no
    longer waits is told at once, else the task would say "waiting" through its first chunk."""
    told: list[PromptProgress] = []
    channel, clock = channel_with_clock(told)

    def read() -> None:
        channel.report_prompt(PromptProgress(4096, 0, 0, waiting=True))  # admitted
        clock.now += 0.01
        channel.report_prompt(PromptProgress(4096, 0, 0), always=True)  # its first chunk
        clock.now += 0.01
        channel.report_prompt(PromptProgress(4096, 0, 512))  # held back: too soon

    await asyncio.to_thread(read)
    await asyncio.sleep(0)
    assert told == [PromptProgress(4096, 0, 0, waiting=True), PromptProgress(4096, 0, 0)]
