"""Opaque ids: their shape, and that none repeats (across buffer refills, threads, a fork)."""

from __future__ import annotations

import os
import re
import threading

import pytest

from lmsp_desktop.core.ids import new_id

ID_SHAPE = re.compile(r"resp_[0-9a-f]{24}")


def test_ids_have_96_random_bits_in_hex_and_never_repeat() -> None:
    ids = [new_id("resp") for _ in range(5000)]  # many refills of the random buffer
    assert all(ID_SHAPE.fullmatch(i) for i in ids)
    assert len(set(ids)) == len(ids)


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
