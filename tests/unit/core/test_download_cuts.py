"""A download whose connection is cut again and again fails with a message a person can act
on: the file's name, the cause, the bytes kept."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from lmsp_desktop.core.downloads.fetch import RETRIES, Transfer, _download
from lmsp_desktop.core.errors import LmspError


class NoWait(threading.Event):
    """A stop flag whose backoff wait returns at once (the real one waits 1, 2, 4, 8 s)."""

    def wait(self, timeout: float | None = None) -> bool:
        return False


def test_a_download_cut_again_and_again_names_the_file_and_the_cause(tmp_path: Path) -> None:
    """A reviewer's hub died mid-download: the task said `The download of b179c9523d0e… was
    cut 6 times without progress (_Cut)`: the blob's digest, a private class name, and one
    more cut than docs/downloads.md's five."""
    with socket.socket() as server:  # a hub that takes each connection and drops it
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]

        def drop_each() -> None:
            for _ in range(RETRIES):
                connection, _address = server.accept()
                # The request read first: closed with it unread, the kernel answers with a
                # reset ("Connection reset by peer", seen under load) instead of the clean
                # close a hub that dies mid-answer gives.
                connection.settimeout(10)
                request = b""
                while b"\r\n\r\n" not in request:
                    chunk = connection.recv(65536)
                    if not chunk:
                        break
                    request += chunk
                connection.close()

        dropping = threading.Thread(target=drop_each, daemon=True)
        dropping.start()
        blob = tmp_path / "blobs" / ("ab" * 32)
        transfer = Transfer(stop=NoWait())
        with pytest.raises(LmspError) as caught:
            _download(
                f"http://127.0.0.1:{port}/file", blob, "model.Q4_1.gguf", {}, 1000, "", transfer
            )
        dropping.join(10)
    message = caught.value.message
    assert caught.value.code == "download_interrupted"
    assert message.startswith(
        f"The download of model.Q4_1.gguf was cut {RETRIES} times in a row without progress"
    ), message
    assert "closed connection without response" in message and "_Cut" not in message, message
    assert "0 of 1000 bytes are kept" in message


def test_a_hub_that_refuses_the_connection_is_unreachable_at_the_first_try(
    tmp_path: Path,
) -> None:
    """The walk's hub went away mid-download: five silent reconnects (15 s of backoff) came
    before the window showed the wait. A refused connection is no cut: it says at once
    that the hub cannot be reached, which the manager turns into its announced wait."""
    with socket.socket() as free:  # a port nothing listens on: every attempt is refused
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    waits: list[float | None] = []

    class CountingWait(threading.Event):
        def wait(self, timeout: float | None = None) -> bool:
            waits.append(timeout)
            return False

    blob = tmp_path / "blobs" / ("ab" * 32)
    transfer = Transfer(stop=CountingWait())
    with pytest.raises(LmspError) as caught:
        _download(f"http://127.0.0.1:{port}/file", blob, "model.Q4_1.gguf", {}, 1000, "", transfer)
    assert caught.value.code == "hub_unreachable"
    assert "cannot be reached (Connection refused)" in caught.value.message
    assert waits == []  # no backoff before saying so
