"""The CLI's one request to the service, when the service dies while answering: a connection
reset or an answer cut off is "does not answer" (service_unavailable), never a traceback
(`models pull` printed ConnectionResetError when its service was killed mid-download)."""

from __future__ import annotations

import socket
import struct
import threading

import pytest

from lmsp_desktop.cli_service import call
from lmsp_desktop.core.errors import LmspError


@pytest.mark.parametrize("reset", [True, False])
def test_a_service_gone_mid_answer_does_not_answer(reset: bool) -> None:
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def answer_then_die() -> None:
        conn, _ = server.accept()
        conn.recv(65536)
        if reset:  # SO_LINGER 0: the close sends RST, as a process killed mid-answer does
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.close()  # else: closed before any status line (RemoteDisconnected)

    thread = threading.Thread(target=answer_then_die)
    thread.start()
    try:
        with pytest.raises(LmspError) as caught:
            call(f"http://127.0.0.1:{port}/v1/tasks/x", "lmsp_token", timeout=10)
    finally:
        thread.join(10)
        server.close()
    assert caught.value.code == "service_unavailable"
    assert "does not answer" in caught.value.message
