"""Stopping the HTTP host closes every connection of the service, even one whose client stopped
reading: aiohttp's cleanup closes such a connection gently (transport.close(), which waits for
the answers still buffered to be sent), so without more its socket stayed open after stop()
returned, and was found open (a ResourceWarning) whenever the garbage collector met it."""

from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path

from lmsp_desktop.app import Core
from lmsp_desktop.core.engines.fake import FakeEngine
from tests.support.polling import until


def sockets_of_this_process_on(port: int) -> list[str]:
    """The TCP sockets this process holds whose local port is `port` (Linux /proc)."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    found = []
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        with open(table) as lines:
            next(lines)
            for line in lines:
                fields = line.split()
                local_port = int(fields[1].rsplit(":", 1)[1], 16)
                if local_port == port and fields[9] in inodes:
                    found.append(line.strip())
    return found


async def test_stop_closes_a_connection_whose_client_stopped_reading(data_dir: Path) -> None:
    core = Core(data_dir, port=0, engine=FakeEngine(), include_demo=False)
    await core.start()
    assert core.host is not None
    port = core.host.port
    # A client that asks for many answers in one go (HTTP pipelining) and never reads them:
    # its small receive window fills, then the server's socket buffer, then the transport's.
    client = socket.socket()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    client.connect(("127.0.0.1", port))
    client.setblocking(False)
    request = b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    asking = asyncio.create_task(asyncio.get_running_loop().sock_sendall(client, request * 40_000))
    try:
        assert core.host._runner is not None and core.host._runner.server is not None
        server = core.host._runner.server  # to see the answers pile up, nothing more

        def answers_stuck_in_the_service() -> bool:
            return any(
                c.transport is not None and c.transport.get_write_buffer_size() > 0
                for c in server.connections
            )

        await until(answers_stuck_in_the_service, limit=30, what="answers to pile up")
        before = sockets_of_this_process_on(port)  # the listener and this connection
        asking.cancel()

        await core.stop()

        assert sockets_of_this_process_on(port) == [], before
    finally:
        asking.cancel()
        client.close()
        await asyncio.sleep(0)
