"""Opaque ids: their shape (time, then random bits), their order, and that none repeats
(across buffer refills, threads, a fork, a clock stepped back)."""

from __future__ import annotations

import os
import re
import threading
import time

import pytest

from lmsp_desktop.core import ids as ids_module
from lmsp_desktop.core.api.anthropic.render import new_message_id
from lmsp_desktop.core.api.chat.render import new_chat_id
from lmsp_desktop.core.api.completions.render import new_completion_id
from lmsp_desktop.core.api.responses import new_response_id
from lmsp_desktop.core.ids import new_id

# 12 hex digits of milliseconds, then 24 of random bits.
ID_SHAPE = re.compile(r"resp_(?P<ms>[0-9a-f]{12})(?P<random>[0-9a-f]{24})")


def test_ids_have_their_time_and_96_random_bits_in_hex_and_never_repeat() -> None:
    before = time.time_ns() // 1_000_000
    ids = [new_id("resp") for _ in range(5000)]  # many refills of the random buffer
    after = time.time_ns() // 1_000_000
    shapes = [ID_SHAPE.fullmatch(i) for i in ids]
    assert all(shapes)
    assert all(before <= int(m["ms"], 16) <= after for m in shapes if m)
    assert len(set(ids)) == len(ids)
    # Every one of the 24 random digits varies (none is a constant or a counter's high end).
    randoms = [m["random"] for m in shapes if m]
    assert all(len({r[at] for r in randoms}) == 16 for at in range(24))


def test_every_api_makes_task_ids_of_the_same_layout() -> None:
    made = {
        "resp_": new_response_id(),
        "chatcmpl-": new_chat_id(),
        "cmpl-": new_completion_id(),
        "msg_": new_message_id(),
    }
    for prefix, task_id in made.items():
        assert task_id.startswith(prefix)
        assert re.fullmatch(r"[0-9a-f]{36}", task_id.removeprefix(prefix)), task_id


def test_ids_sort_in_the_order_they_were_made(monkeypatch: pytest.MonkeyPatch) -> None:
    """So that a create's rows go in at the end of every index keyed by the id."""
    clock = iter(range(1_764_000_000_000, 1_764_000_000_000 + 300))
    monkeypatch.setattr(ids_module.time, "time_ns", lambda: next(clock) * 1_000_000)
    made = [new_id("resp") for _ in range(300)]
    assert sorted(made) == made


def test_ids_never_repeat_when_the_clock_stands_still_or_steps_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A restart or an NTP step can give the same milliseconds again: the random bits alone
    keep the ids apart."""
    steps = [1_764_000_000_000] * 2000 + [1_763_999_000_000] * 2000 + [1_764_000_000_000] * 2000
    clock = iter(steps)
    monkeypatch.setattr(ids_module.time, "time_ns", lambda: next(clock) * 1_000_000)
    made = [new_id("resp") for _ in steps]
    assert len(set(made)) == len(made)
    randoms = {m["random"] for m in map(ID_SHAPE.fullmatch, made) if m}
    assert len(randoms) == len(made)


def test_threads_never_get_the_same_id() -> None:
    found: list[list[str]] = [[] for _ in range(4)]

    def make(into: list[str]) -> None:
        into.extend(new_id("resp") for _ in range(3000))

    threads = [threading.Thread(target=make, args=(into,)) for into in found]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    every = [i for into in found for i in into]
    assert len(set(every)) == len(every) == 12000


# Python 3.12 warns about fork() in a process with threads; the child here only writes a pipe.
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_child_does_not_repeat_the_parents_next_ids() -> None:
    new_id("resp")  # the buffer now holds bytes not yet handed out
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: send its next ids and leave at once
        os.close(read_end)
        os.write(write_end, " ".join(new_id("resp") for _ in range(10)).encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        child = set(pipe.read().split())
    os.waitpid(pid, 0)
    parent = {new_id("resp") for _ in range(10)}
    assert len(child) == 10 and not child & parent
