"""Prompt priority among a model's contexts (core/engines/llama_cores.py): a chunk waits for
the streaming contexts' steps, they wait for the chunk, one step per chunk, first come first
read. `interrupted` answering True makes a call return False instead of waiting: the call
would have waited."""

from __future__ import annotations

from lmsp_desktop.core.engines.llama_cores import Cores

READER, STREAM, OTHER = 1, 2, 3


def would_wait() -> bool:
    return True


def test_without_a_prompt_streams_step_freely() -> None:
    cores = Cores(2)
    cores.state(STREAM, streaming=True, ticket=None)
    for _ in range(3):
        assert cores.begin_step(STREAM, would_wait)
        cores.end_step(STREAM)


def test_a_chunk_waits_for_each_streaming_context_to_take_its_step() -> None:
    cores = Cores(2)
    cores.state(STREAM, streaming=True, ticket=None)
    cores.state(READER, streaming=False, ticket=cores.ticket())
    assert not cores.begin_chunk(READER, wait_turn=True, interrupted=would_wait)
    assert cores.begin_step(STREAM, would_wait)
    assert not cores.begin_chunk(READER, wait_turn=True, interrupted=would_wait)  # mid-step
    cores.end_step(STREAM)
    assert cores.begin_chunk(READER, wait_turn=True, interrupted=would_wait)


def test_streams_wait_for_the_chunk_and_take_one_step_per_chunk() -> None:
    cores = Cores(2)
    cores.state(STREAM, streaming=True, ticket=None)
    cores.state(READER, streaming=False, ticket=cores.ticket())
    assert cores.begin_step(STREAM, would_wait)
    cores.end_step(STREAM)
    assert not cores.begin_step(STREAM, would_wait)  # stepped: the chunk goes first
    assert cores.begin_chunk(READER, wait_turn=True, interrupted=would_wait)
    assert not cores.begin_step(STREAM, would_wait)  # the chunk is being read
    cores.end_chunk(READER)
    assert cores.begin_step(STREAM, would_wait)
    cores.end_step(STREAM)
    assert cores.streaming()
    # The prompt read, its context says so: the stream steps freely again.
    cores.state(READER, streaming=True, ticket=None)
    assert cores.begin_step(STREAM, would_wait)


def test_an_idle_context_is_not_waited_for() -> None:
    cores = Cores(2)
    cores.state(STREAM, streaming=True, ticket=None)
    cores.state(STREAM, streaming=False, ticket=None)  # its last stream ended
    cores.state(READER, streaming=False, ticket=cores.ticket())
    assert cores.begin_chunk(READER, wait_turn=True, interrupted=would_wait)
    assert not cores.streaming()


def test_two_prompts_first_come_first_read() -> None:
    cores = Cores(2)
    first, second = cores.ticket(), cores.ticket()
    cores.state(OTHER, streaming=True, ticket=second)  # a context with a stream and a prompt
    cores.state(READER, streaming=False, ticket=first)
    # Not its turn: a context with generating sequences does not wait for it.
    assert not cores.begin_chunk(OTHER, wait_turn=False, interrupted=lambda: False)
    assert cores.begin_step(OTHER, would_wait)
    cores.end_step(OTHER)
    assert cores.begin_chunk(READER, wait_turn=True, interrupted=would_wait)
    cores.end_chunk(READER)
    cores.state(READER, streaming=False, ticket=None)  # its prompt is read
    assert cores.begin_step(OTHER, would_wait)  # the chunk ended: its step
    cores.end_step(OTHER)
    assert cores.begin_chunk(OTHER, wait_turn=False, interrupted=would_wait)


def test_a_context_with_the_first_prompt_never_waits_for_its_own_step() -> None:
    # Its step, then a cancel came before its chunk: it steps again rather than wait for
    # a chunk only it would read.
    cores = Cores(2)
    cores.state(READER, streaming=True, ticket=cores.ticket())
    assert cores.begin_step(READER, would_wait)
    cores.end_step(READER)
    assert cores.begin_step(READER, would_wait)
    cores.end_step(READER)
    assert cores.begin_chunk(READER, wait_turn=False, interrupted=would_wait)
