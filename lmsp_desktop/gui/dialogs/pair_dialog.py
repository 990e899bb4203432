""" "Pair a client…": a one-time code, the service URL, a QR code of both, a Python snippet."""

from __future__ import annotations

import time

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

from lmsp_desktop.core.auth import SCOPES
from lmsp_desktop.gui import aio
from lmsp_desktop.gui.core_api import CoreApi
from lmsp_desktop.gui.qr import QrWidget

DEFAULT_SCOPES = ("models:read", "responses:read", "responses:write")


def claim_link(url: str, code: str) -> str:
    """What the QR code holds: the service URL and the code, in one scannable line."""
    return f"{url}/v1/pairing/claim?code={code}"


def python_snippet(url: str, code: str) -> str:
    return (
        "import httpx, openai\n\n"
        f'answer = httpx.post("{url}/v1/pairing/claim",\n'
        f'                    json={{"code": "{code}", "client_name": "my-script"}}).json()\n'
        "# Keep answer['access_token'] somewhere safe: it is shown only once.\n"
        f'client = openai.OpenAI(base_url="{url}/v1", api_key=answer["access_token"])\n'
        'reply = client.responses.create(model="smollm2-135m-instruct", input="Hello!")\n'
        "print(reply.output_text)\n"
    )


class PairDialog(QDialog):
    """Creates a one-time claim code and shows everything a client needs to use it."""

    def __init__(self, core: CoreApi, url: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Pair a client")
        self.core = core
        self.url = url
        self.code = ""
        self.expires_at: float | None = None
        mono = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        self.code_label = QLabel("…")
        big = QFont(mono)  # a copy: the snippet keeps the normal size
        big.setPointSize(26)
        big.setBold(True)
        self.code_label.setFont(big)
        self.code_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.expiry = QLabel()
        self.url_label = QLabel(f"Service: <b>{url}</b>")
        self.url_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.qr = QrWidget()
        self.scope_boxes: dict[str, QCheckBox] = {}
        scopes_row = QHBoxLayout()
        for scope in SCOPES:
            box = QCheckBox(scope)
            box.setChecked(scope in DEFAULT_SCOPES)
            self.scope_boxes[scope] = box
            scopes_row.addWidget(box)
        self.new_button = QPushButton("New code")
        self.new_button.clicked.connect(lambda: aio.spawn(self.new_code(), self))
        scopes_row.addWidget(self.new_button)
        self.snippet = QPlainTextEdit(readOnly=True)
        self.snippet.setFont(mono)
        self.snippet.setMinimumHeight(150)
        self.snippet.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.resize(700, 560)
        copy = QPushButton("Copy snippet")
        copy.clicked.connect(
            lambda: QGuiApplication.clipboard().setText(self.snippet.toPlainText())
        )

        info = QVBoxLayout()
        info.addWidget(QLabel("Give this one-time code to the client:"))
        info.addWidget(self.code_label)
        info.addWidget(self.expiry)
        info.addWidget(self.url_label)
        info.addWidget(
            QLabel(
                "The client exchanges it for its own token at\n"
                "POST /v1/pairing/claim, or scans the QR code."
            )
        )
        info.addStretch()
        grid = QGridLayout()
        grid.addLayout(info, 0, 0)
        grid.addWidget(self.qr, 0, 1)
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

    def copy_snippet(self) -> None:
        QGuiApplication.clipboard().setText(self.snippet.toPlainText())

    def scopes(self) -> list[str]:
        return [s for s, box in self.scope_boxes.items() if box.isChecked()]

    async def new_code(self) -> None:
        self.new_button.setEnabled(False)
        try:
            claim = await self.core.create_claim_code(frozenset(self.scopes()))
        finally:
            self.new_button.setEnabled(True)
        self.code = str(claim["code"])
        self.expires_at = claim.get("expires_at")
        self.code_label.setText(self.code)
        self.qr.set_text(claim_link(self.url, self.code))
        self.snippet.setPlainText(python_snippet(self.url, self.code))
        self._tick()

    def _tick(self) -> None:
        if self.expires_at is None:
            self.expiry.setText("")
            return
        left = int(self.expires_at - time.time())
        if left <= 0:
            self.expiry.setText("This code has expired. Choose New code.")
        else:
            self.expiry.setText(f"Works once, for {left // 60}:{left % 60:02d} more.")
