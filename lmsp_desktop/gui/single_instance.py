"""One window per data directory: a second `lmsp-desktop` brings the running one to the front
and exits 0, as LM Studio and Ollama's app do, instead of failing on the data-dir lock.

The running window listens on a local socket whose name comes from its data directory; a new
launch first tries that socket, and only when nobody answers does it start a core (whose
data-dir lock still refuses a second service, e.g. a `serve` of the same folder)."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QObject
from PySide6.QtNetwork import QLocalServer, QLocalSocket

log = logging.getLogger(__name__)
SHOW = b"show\n"
SHOWN = b"shown\n"
MAX_SOCKET_PATH = 100  # sun_path holds 108 bytes on Linux, 104 on macOS
WAIT_MS = 3000  # a running window answers at once; a busy one (hashing a model) a bit later


def server_name(data_dir: Path) -> str:
    """The local socket for a data directory: a file in it (0700, so no other user can take
    the name first), or, where that path is too long for a socket, a name of its hash in
    the temporary folder."""
    folder = Path(data_dir).expanduser().resolve()
    inside = folder / "window.sock"
    if len(str(inside).encode()) <= MAX_SOCKET_PATH:
        return str(inside)
    return "lmsp-desktop-" + hashlib.sha256(str(folder).encode()).hexdigest()[:16]


def hand_over(data_dir: Path, wait_ms: int = WAIT_MS) -> bool:
    """Ask the window running on `data_dir` to come to the front. True when it did: this
    launch is done. False when no window listens (start normally). Blocking, before any loop."""
    socket = QLocalSocket()
    socket.connectToServer(server_name(data_dir))
    if not socket.waitForConnected(wait_ms):
        return False
    socket.write(SHOW)
    socket.waitForBytesWritten(wait_ms)
    answer = b""
    while SHOWN not in answer and socket.waitForReadyRead(wait_ms):
        answer += bytes(socket.readAll().data())
    socket.disconnectFromServer()
    return SHOWN in answer


class WindowServer(QObject):
    """Listens for later launches on the same data directory and calls `show` for each."""

    def __init__(self, data_dir: Path, show: Callable[[], None], parent: QObject | None = None):
        super().__init__(parent)
        self._show = show
        self.server = QLocalServer(self)
        self.server.setSocketOptions(QLocalServer.SocketOption.UserAccessOption)
        self.server.newConnection.connect(self._accept)
        name = server_name(data_dir)
        # Only the holder of the data-dir lock gets here, so a socket file left under this
        # name is a killed window's: remove it, or listen() fails with "address in use"
        # (with UserAccessOption Qt also moves its new socket over an old file).
        QLocalServer.removeServer(name)
        if not self.server.listen(name):
            log.warning("a second launch cannot reach this window: %s", self.server.errorString())

    def _accept(self) -> None:
        while self.server.hasPendingConnections():
            peer = self.server.nextPendingConnection()
            peer.readyRead.connect(lambda peer=peer: self._read(peer))
            peer.disconnected.connect(peer.deleteLater)
            if peer.bytesAvailable():
                self._read(peer)

    def _read(self, peer: QLocalSocket) -> None:
        if SHOW in bytes(peer.readAll().data()):
            log.info("another launch asked for this window")
            self._show()
            peer.write(SHOWN)
            peer.flush()

    def close(self) -> None:
        self.server.close()
