""" "Pair a client…": a one-time code, the service URL, a QR code of both, a Python snippet."""

from __future__ import annotations

import time
from urllib.parse import urlsplit

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QFont, QFontDatabase, QGuiApplication
from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from lmsp_desktop.core.scopes import DEFAULT_SCOPES, SCOPES
from lmsp_desktop.gui import aio
from lmsp_desktop.gui.addresses import lan_address, local_url, reachable_url
from lmsp_desktop.gui.core_api import CoreApi
from lmsp_desktop.gui.format import is_loopback
from lmsp_desktop.gui.qr import QrWidget
from lmsp_desktop.gui.snippets import pair_python

__all__ = ["PairDialog", "lan_address", "reachable_url"]  # the tests find them here

# The Settings checkbox that serves on the network (settings_dialog.py), as the note names it.
NETWORK_CHOICE = "Let other devices on my network use it"


def claim_link(url: str, code: str) -> str:
    """What the QR code holds: the service's base URL and the code, as text a phone shows
    (a link would open a GET on the claim endpoint, which only takes POST)."""
    return f"LMSP pairing\nURL: {url}/v1\nCode: {code}"


def network_note(url: str, host: str, remote_url: str | None) -> str:
    """Whether other devices can use the code, and at which address."""
    if remote_url is not None:
        return f"Other devices reach the service at {remote_url}."
    if is_loopback(host):
        return (
            "Other devices cannot reach this service: it listens on this computer only "
            f"({host}). To pair a phone or another computer, tick “{NETWORK_CHOICE}” "
            "in File ▸ Settings and restart LMSP Desktop; this computer's own clients can "
            "use the code as shown."
        )
    # Serving on the network, but this computer's address on it is unknown (no route).
    return (
        f"The service listens on the network ({host}), but this computer's address there "
        f"could not be found: other devices use http://ADDRESS:{urlsplit(url).port}/v1 with "
        "this computer's address, and the code as shown."
    )


def claim_hint(with_qr: bool) -> str:
    """How the client uses the code; the QR code is mentioned only where one is shown."""
    # Beside a QR code the text has half the width: there it breaks before the route.
    where = "The client exchanges it for its own token at{}POST /v1/pairing/claim"
    return where.format("\n") + ", or scans the QR code." if with_qr else where.format(" ") + "."


class PairDialog(QDialog):
    """Creates a one-time claim code and shows everything a client needs to use it."""

    def __init__(
        self, core: CoreApi, url: str, parent: QWidget | None = None, *, host: str = "127.0.0.1"
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("Pair a client")
        self.core = core
        self.url = local_url(url)  # never 0.0.0.0: this machine's clients use loopback
        self.code = ""
        self.pairing_id: str | None = None
        self.used_by: str | None = None
        self.remote_url = reachable_url(url, host)
        self.network_note = QLabel(network_note(url, host, self.remote_url))
        self.network_note.setWordWrap(True)
        self.expires_at: float | None = None
        mono = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        self.code_label = QLabel("…")
        big = QFont(mono)  # a copy: the snippet keeps the normal size
        big.setPointSize(26)
        big.setBold(True)
        self.code_label.setFont(big)
        self.code_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.expiry = QLabel()
        self.url_label = QLabel(f"Service: <b>{self.url}</b>")
        self.url_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.qr = QrWidget(parent=self)
        self.scope_boxes: dict[str, QCheckBox] = {}
        scopes_row = QHBoxLayout()
        self._rescope = QTimer(self, singleShot=True, interval=400)
        self._rescope.timeout.connect(lambda: aio.spawn(self.new_code(), self))
        for scope in SCOPES:
            box = QCheckBox(scope)
            box.setChecked(scope in DEFAULT_SCOPES)
            box.toggled.connect(lambda _=False: self._rescope.start())  # a code per choice
            self.scope_boxes[scope] = box
            scopes_row.addWidget(box)
        self.new_button = QPushButton("New code")
        self.new_button.clicked.connect(lambda: aio.spawn(self.new_code(), self))
        scopes_row.addWidget(self.new_button)
        self.snippet = QPlainTextEdit(readOnly=True)
        self.snippet.setFont(mono)
        self.snippet.setMinimumHeight(150)
        self.snippet.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        copy = QPushButton("Copy snippet")
        copy.clicked.connect(
            lambda: QGuiApplication.clipboard().setText(self.snippet.toPlainText())
        )

        info = QVBoxLayout()
        info.addWidget(QLabel("Give this one-time code to the client:"))
        info.addWidget(self.code_label)
        info.addWidget(self.expiry)
        info.addWidget(self.url_label)
        info.addWidget(self.network_note)
        with_qr = self.remote_url is not None
        self.claim_hint = QLabel(claim_hint(with_qr))
        info.addWidget(self.claim_hint)
        grid = QGridLayout()
        grid.addLayout(info, 0, 0)
        if with_qr:
            info.addStretch()  # the text stays at the top beside the taller QR code
            grid.addWidget(self.qr, 0, 1)
        else:  # no QR code, and no empty room kept for one
            self.qr.hide()
        layout = QVBoxLayout(self)
        layout.addLayout(grid)
        layout.addWidget(QLabel("Scopes the code grants:"))
        layout.addLayout(scopes_row)
        layout.addWidget(QLabel("Python (openai client):"))
        layout.addWidget(self.snippet)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.addButton(copy, QDialogButtonBox.ButtonRole.ActionRole)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)
        self._clock = QTimer(self, interval=1000)
        self._clock.timeout.connect(self._tick)
        self._clock.start()
        # Beside a QR code the dialog needs its height; without one it is only as tall as
        # its content (the snippet at its own height, no gap left where the QR would be).
        self.resize(700, 560 if with_qr else self.sizeHint().height())

    def copy_snippet(self) -> None:
        QGuiApplication.clipboard().setText(self.snippet.toPlainText())

    def scopes(self) -> list[str]:
        return [s for s, box in self.scope_boxes.items() if box.isChecked()]

    async def new_code(self) -> None:
        """End the shown code (one-time means one) and show a new one for the ticked scopes."""
        self.new_button.setEnabled(False)
        try:
            await self.end_code()
            if not self.scopes():
                self.code_label.setText("…")
                self.expiry.setText("Tick at least one scope.")
                return
            claim = await self.core.create_claim_code(frozenset(self.scopes()))
        finally:
            self.new_button.setEnabled(True)
        self.pairing_id = str(claim["pairing_id"])
        self.used_by = None
        self.code = str(claim["code"])
        self.expires_at = claim.get("expires_at")
        self.code_label.setText(self.code)
        self.qr.set_text(claim_link(self.remote_url, self.code) if self.remote_url else "")
        self.qr.setVisible(self.remote_url is not None)
        self.snippet.setPlainText(
            pair_python(self.remote_url or self.url, self.code, self.scopes())
        )
        self._tick()

    async def end_code(self) -> None:
        if self.pairing_id is not None:
            pairing_id, self.pairing_id, self.expires_at = self.pairing_id, None, None
            await self.core.end_claim_code(pairing_id)

    def on_pairing_changed(self) -> None:
        aio.spawn(self.check_used(), self)

    async def check_used(self) -> None:
        """After pairing news: has a client claimed the shown code?"""
        if self.pairing_id is None:
            return
        status = await self.core.claim_code_status(self.pairing_id)
        if status["state"] == "issued":
            self.used_by = str(status["client_name"])
            self.pairing_id = self.expires_at = None
            self._tick()

    def done(self, result: int) -> None:
        """Closing ends the code at once: it is not left valid behind a closed dialog."""
        if self.pairing_id is not None:
            aio.spawn(self.core.end_claim_code(self.pairing_id))
            self.pairing_id = None
        super().done(result)

    def _tick(self) -> None:
        if self.used_by is not None:
            self.expiry.setText(
                f"Used by {self.used_by}. It is paired now; choose New code for another client."
            )
            return
        if self.expires_at is None:
            self.expiry.setText("")
            return
        left = int(self.expires_at - time.time())
        if left <= 0:
            self.expiry.setText("This code has expired. Choose New code.")
        else:
            self.expiry.setText(f"Works once, for {left // 60}:{left % 60:02d} more.")
