"""The Clients page: pending pairing requests as cards, and the paired clients table."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QFontDatabase, QShowEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QMessageBox,
    QPushButton,
    QScrollArea,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.scopes import ADMIN, SCOPES
from lmsp_desktop.gui import aio
from lmsp_desktop.gui.core_api import CoreApi
from lmsp_desktop.gui.format import title_width
from lmsp_desktop.gui.models.client_table import COL_CREATED, COL_SCOPES, ClientTableModel
from lmsp_desktop.gui.pages.column_fit import ColumnFitter

ARM_DELAY_MS = 1200  # a card that moved under the cursor cannot be answered this soon
# The pairing requests and the paired clients are read again every this many ticks of the
# page's 1 s clock: a request answered or a token made from the CLI (another process, nothing
# told to this one) shows within two seconds. The requests are read while the window is shown
# (the sidebar counts them on every page), the clients while the page is; a query of a few
# rows each, and the cards rebuilt only when the requests changed.
READ_EVERY_TICKS = 2
# What an answer says when the request was answered elsewhere meanwhile (another window, or
# `lmsp-desktop pairing approve|deny` in a shell): the core's "no pairing request waits with
# the code or id 'pair_01…'" named an id the owner never saw.
ANSWERED_ELSEWHERE = {
    "approved": "was already approved from another window or the command line",
    "denied": "was already denied from another window or the command line",
    "expired": "has expired",
}
# How long an answer's line ("Approved laptop-aider…") stays: it was still there minutes later.
NOTICE_MS = 8000
# A request as a card shows it, to size the area kept for the cards (filled in, never sent):
# one asking for admin, the tallest (its warning under the scopes), is seen whole.
SAMPLE_REQUEST: dict[str, Any] = {
    "client_name": "laptop-aider",
    "address": "192.168.1.23",
    "user_code": "WDJB-MJHT",
    "scopes": ["responses:read", "responses:write", "models:read", ADMIN],
    "expires_at": 0.0,
}
ADMIN_WARNING = (
    "admin lets the client manage every client's tasks, other clients and tokens, and the "
    "service's settings. Grant it only to a tool you fully trust."
)


class PairingCard(QFrame):
    """One waiting request: who asks, the code to compare, the scopes, the answer buttons."""

    answered = Signal(str, dict, list)  # action, request, granted scopes

    def __init__(
        self, request: dict[str, Any], parent: QWidget | None = None, *, armed: bool = True
    ) -> None:
        super().__init__(parent)
        self.request = request
        self.armed = armed
        self.busy = False  # its answer is on its way: the buttons stay off
        self.setFrameShape(QFrame.Shape.StyledPanel)
        title = QLabel(
            f"<b>{request['client_name']}</b> wants to pair"
            + (f" from {request['address']}" if request.get("address") else "")
        )
        self.code = QLabel(request["user_code"])
        font = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        font.setPointSize(24)
        font.setBold(True)
        self.code.setFont(font)
        self.code.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        hint = QLabel("Check that the client shows the same code.")
        self.scopes: dict[str, QCheckBox] = {}
        scope_row = QHBoxLayout()
        scope_row.addWidget(QLabel("Grant:"))
        for scope in request["scopes"]:
            box = QCheckBox(scope)
            # admin is never granted by default: the owner must tick it on purpose.
            box.setChecked(scope != ADMIN)
            if scope == ADMIN:
                box.setStyleSheet("QCheckBox { color: #e04848; font-weight: bold; }")
                box.setToolTip(ADMIN_WARNING)
            box.toggled.connect(self._update)
            self.scopes[scope] = box
            scope_row.addWidget(box)
        scope_row.addStretch()
        self.admin_note = QLabel(f"⚠ {ADMIN_WARNING}")
        self.admin_note.setWordWrap(True)
        self.admin_note.setStyleSheet("color: #e04848")
        self.admin_note.setVisible(ADMIN in request["scopes"])
        self.countdown = QLabel()
        self.approve = QPushButton("Approve")
        self.approve.setDefault(True)
        self.deny = QPushButton("Deny")
        self.ignore = QPushButton("Ignore")
        self.ignore.setToolTip("Hide this request; the client is not told and it expires")
        self.approve.clicked.connect(lambda: self._answer("approve"))
        self.deny.clicked.connect(lambda: self._answer("deny"))
        self.ignore.clicked.connect(lambda: self._answer("ignore"))
        buttons = QHBoxLayout()
        buttons.addWidget(self.countdown, 1)
        for button in (self.ignore, self.deny, self.approve):
            buttons.addWidget(button)
        layout = QVBoxLayout(self)
        layout.addWidget(title)
        layout.addWidget(self.code)
        layout.addWidget(hint)
        layout.addLayout(scope_row)
        layout.addWidget(self.admin_note)
        layout.addLayout(buttons)
        if not armed:  # it took the place of a card just answered: no double-click through
            QTimer.singleShot(ARM_DELAY_MS, self._arm)
        self.tick()

    def _arm(self) -> None:
        self.armed = True
        self._update()

    def disarm(self) -> None:
        """It moved (a card above it went): no click for a moment, as a card moved up after
        an answer; a click meant for the card gone must not answer this one."""
        if self.armed:
            self.armed = False
            self._update()
            QTimer.singleShot(ARM_DELAY_MS, self._arm)

    @property
    def pairing_id(self) -> str:
        return str(self.request["pairing_id"])

    def granted(self) -> list[str]:
        return [s for s, box in self.scopes.items() if box.isChecked()]

    def _update(self) -> None:
        live = self.armed and not self.busy and self.seconds_left() > 0
        self.approve.setEnabled(live and bool(self.granted()))
        self.deny.setEnabled(live)
        self.ignore.setEnabled(live)

    def seconds_left(self) -> int:
        return max(0, int(self.request["expires_at"] - time.time()))

    def tick(self) -> None:
        left = self.seconds_left()
        self.countdown.setText(
            f"Expires in {left // 60}:{left % 60:02d}" if left else "This request has expired."
        )
        self._update()

    def _answer(self, action: str) -> None:
        self.busy = True
        self._update()
        self.answered.emit(action, self.request, self.granted())

    def answer_failed(self) -> None:
        """Its answer was refused (and it still waits): the buttons back."""
        self.busy = False
        self._update()


class ScopeDialog(QDialog):
    """Choose a paired client's scopes (opened with open(), never exec())."""

    def __init__(self, client: dict[str, Any], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle(f"Scopes of {client['name']}")
        self.setMinimumWidth(title_width(self.windowTitle(), self.fontMetrics()))
        self.client = client
        layout = QVBoxLayout(self)
        self.boxes: dict[str, QCheckBox] = {}
        for scope in SCOPES:
            box = QCheckBox(scope)
            box.setChecked(scope in client["scopes"])
            self.boxes[scope] = box
            layout.addWidget(box)
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Save | QDialogButtonBox.StandardButton.Cancel
        )
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)

    def scopes(self) -> list[str]:
        return [s for s, box in self.boxes.items() if box.isChecked()]


class ClientsPage(QWidget):
    """Answers pairing requests and manages paired clients (revoke, scopes)."""

    pair_requested = Signal()
    connect_requested = Signal()
    pending_changed = Signal(int)

    def __init__(self, core: CoreApi, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.core = core
        self.cards: list[PairingCard] = []
        self._answered_at = -1e9
        self._expiries: list[float] = []  # when the shown requests run out
        self._requests_seen: list[tuple[str, str]] | None = None  # (id, state) last read
        self._pending_lock = asyncio.Lock()
        self.dialog: QDialog | QMessageBox | None = None
        self.pending_title = QLabel("<b>Pairing requests</b>")
        self.cards_box = QVBoxLayout()
        self.pair_button = QPushButton("Pair a client…")
        self.pair_button.clicked.connect(self.pair_requested)
        self.connect_button = QPushButton("Connect a client…")
        self.connect_button.setToolTip("Make a token here and copy a ready-to-paste snippet")
        self.connect_button.clicked.connect(self.connect_requested)
        self.revoke_button = QPushButton("Revoke…")
        self.revoke_button.clicked.connect(self.confirm_revoke)
        self.scopes_button = QPushButton("Edit scopes…")
        self.scopes_button.clicked.connect(self.edit_scopes)
        bar = QHBoxLayout()
        bar.addWidget(QLabel("<b>Paired clients</b>"))
        bar.addStretch()
        for button in (
            self.scopes_button,
            self.revoke_button,
            self.pair_button,
            self.connect_button,
        ):
            bar.addWidget(button)
        self.model = ClientTableModel(core, parent=self)
        self.table = QTableView()
        self.table.setModel(self.model)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.verticalHeader().hide()
        self.table.setWordWrap(False)  # one line per client; Scopes elides, whole on hover
        letters = self.fontMetrics().averageCharWidth()
        self.fitter = ColumnFitter(
            self.table,
            stretch={COL_SCOPES: (letters * 16, letters * 60)},
            drop_order=[COL_CREATED],
        )
        self.table.selectionModel().selectionChanged.connect(lambda *_: self._update())
        self.model.modelReset.connect(self._update)
        self.empty = QLabel("No clients yet. Approve a pairing request, or choose Pair a client…")
        self.ignored_note = QLabel()
        self.ignored_note.setWordWrap(True)
        self.ignored_note.hide()
        self.notice = QLabel()
        self.notice.setWordWrap(True)
        self.notice.hide()
        self._notice_timer = QTimer(self, singleShot=True)
        self._notice_timer.timeout.connect(self.notice.hide)
        self.no_requests = QLabel(
            "No pairing requests waiting. A client asking to pair shows here, with a code to "
            "compare."
        )
        self.no_requests.setWordWrap(True)
        # The requests, their notes and the answer's line live in an area of one card's height,
        # scrolling when more is there: a card coming or going moved the table and its buttons
        # ~160 px, and a click meant for Revoke… landed elsewhere (or on a card).
        requests = QWidget()
        requests_layout = QVBoxLayout(requests)
        requests_layout.setContentsMargins(0, 0, 0, 0)
        requests_layout.addWidget(self.pending_title)
        requests_layout.addWidget(self.ignored_note)
        requests_layout.addLayout(self.cards_box)
        requests_layout.addWidget(self.no_requests)
        requests_layout.addWidget(self.notice)
        requests_layout.addStretch()
        self.requests_area = QScrollArea()
        self.requests_area.setWidget(requests)
        self.requests_area.setWidgetResizable(True)
        self.requests_area.setFrameShape(QFrame.Shape.NoFrame)
        self.requests_area.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        sample = PairingCard({**SAMPLE_REQUEST, "expires_at": time.time() + 600})
        self.requests_area.setFixedHeight(
            self.pending_title.sizeHint().height()
            + requests_layout.spacing()
            + sample.sizeHint().height()
            + self.fontMetrics().lineSpacing()  # the warning wrapped once more when narrow
        )
        sample.deleteLater()
        layout = QVBoxLayout(self)
        layout.addWidget(self.requests_area)
        layout.addLayout(bar)
        layout.addWidget(self.table)
        layout.addWidget(self.empty)
        self._clock = QTimer(self, interval=1000)
        self._clock.timeout.connect(self._tick)
        self._clock.start()
        self._ticks = 0
        self._reading: asyncio.Task[None] | None = None
        self.model.rowsInserted.connect(self._update)
        self.model.rowsRemoved.connect(self._update)
        self._update()

    def set_active(self, active: bool) -> None:
        """The cards' countdowns move, and the clients are read again every two seconds
        while the page is shown, only while the window is shown."""
        if active:
            self._tick()
            self._clock.start()
        else:
            self._clock.stop()

    def showEvent(self, event: QShowEvent) -> None:
        """Shown (its page chosen, or the window back from the tray): the clients read again.
        A token made from the CLI (`lmsp-desktop token create`) writes the store from another
        process and tells this one nothing: the page kept the list of its last read. Read
        again every READ_EVERY_TICKS seconds while shown (_tick), as the Models page follows
        the stored load settings."""
        super().showEvent(event)
        aio.spawn(self.load(), self)

    async def load(self) -> None:
        await self.reload_pending()
        await self.model.reload()

    def on_pairing_changed(self) -> None:
        aio.spawn(self.load(), self)

    async def reload_pending(self) -> None:
        # One read at a time (the two-second look, a request come in, an answer here): a read
        # begun earlier and finished later must not bring back a card just answered.
        async with self._pending_lock:
            await self._reload_pending()

    async def _reload_pending(self) -> None:
        every = await self.core.pending_pairings(include_ignored=True)
        # Nothing announces an expiry: the clock reloads when one of these runs out (the note
        # said "still polling" about a request long expired).
        self._expiries = [float(r["expires_at"]) for r in every]
        seen = [(str(r["pairing_id"]), str(r["state"])) for r in every]
        if seen == self._requests_seen:
            return  # the usual look every two seconds: nothing changed, nothing rebuilt
        self._requests_seen = seen
        requests = [r for r in every if r["state"] == "pending"]
        ignored = [r for r in every if r["state"] == "ignored"]
        self.ignored_note.setText(
            f"{len(ignored)} ignored request{'s' if len(ignored) != 1 else ''} "
            f"({', '.join(r['client_name'] for r in ignored)}) still polling; "
            "refused (access_denied) when it expires."
        )
        self.ignored_note.setVisible(bool(ignored))
        self._show_cards(requests)
        self.pending_changed.emit(len(self.cards))

    def _show_cards(self, requests: list[dict[str, Any]]) -> None:
        """A card per waiting request, oldest first. Cards still waiting stay as they are (the
        scopes the owner unticked, the button under the cursor); a card whose request went
        (answered here or elsewhere, expired) is removed and those below it, which move up,
        take no click for a moment; a new one comes at its place."""
        waiting = {str(r["pairing_id"]) for r in requests}
        moved = False
        kept: list[PairingCard] = []
        for card in self.cards:
            if card.pairing_id in waiting:
                if moved:
                    card.disarm()
                kept.append(card)
            else:
                card.setParent(None)
                card.deleteLater()
                moved = True
        shown = {card.pairing_id: card for card in kept}
        # Right after an answer the next card moves up under the cursor: arm it later.
        armed = time.monotonic() - self._answered_at > ARM_DELAY_MS / 1000
        self.cards = []
        for index, request in enumerate(requests):
            shown_card = shown.get(str(request["pairing_id"]))
            if shown_card is None:  # requests keep their order: the ones before are in place
                shown_card = self._new_card(request, armed=armed)
                self.cards_box.insertWidget(index, shown_card)
            self.cards.append(shown_card)
        self.pending_title.setVisible(bool(self.cards))
        self.no_requests.setVisible(not self.cards)

    def _new_card(self, request: dict[str, Any], *, armed: bool) -> PairingCard:
        card = PairingCard(request, self, armed=armed)
        card.answered.connect(lambda a, r, s: aio.spawn(self.answer(a, r, s), self))
        return card

    def say(self, text: str) -> None:
        """The line under the requests: what the last answer did, for NOTICE_MS (the next
        answer replaces it)."""
        self.notice.setText(text)
        self.notice.show()
        self._notice_timer.start(NOTICE_MS)

    async def answer(self, action: str, request: dict[str, Any], scopes: list[str]) -> None:
        self._answered_at = time.monotonic()
        try:
            if action == "approve":
                await self.core.approve_pairing(request["pairing_id"], frozenset(scopes))
                self.say(
                    f"Approved {request['client_name']} ({', '.join(scopes)}). It receives "
                    "its token the next time it asks, within a few seconds, and then appears "
                    "under Paired clients."
                )
            elif action == "deny":
                await self.core.deny_pairing(request["pairing_id"])
                # The line tells the last answer (it kept "Approved …" after a later Deny).
                self.say(
                    f"Denied {request['client_name']}: it is refused (access_denied) the next "
                    "time it asks."
                )
            else:
                await self.core.ignore_pairing(request["pairing_id"])
                self.say(
                    f"Ignored {request['client_name']}: it keeps asking until its request "
                    "expires, then it is refused."
                )
        except LmspError as exc:
            outcome = None
            if exc.code == "pairing_not_found":
                outcome = await self.core.pairing_outcome(request["pairing_id"])
            if outcome in ANSWERED_ELSEWHERE:
                # Answered in a shell or another window since the last look: say so, and the
                # card goes (the reload below) instead of a box naming an internal id.
                self.say(
                    f"The request from {request['client_name']} "
                    f"{ANSWERED_ELSEWHERE[str(outcome)]}; nothing changed."
                )
            else:
                aio.show_error(self, exc)
                for card in self.cards:
                    if card.pairing_id == request["pairing_id"]:
                        card.answer_failed()
        await self.load()

    def _tick(self) -> None:
        for card in self.cards:
            card.tick()
        if any(at <= time.time() for at in self._expiries):
            self._expiries = []
            aio.spawn(self.reload_pending(), self)
        self._ticks += 1
        reading = self._reading is not None and not self._reading.done()
        if self._ticks % READ_EVERY_TICKS == 0 and not reading:
            self._reading = aio.spawn(self._read_store(clients=self.isVisible()), self)

    async def _read_store(self, *, clients: bool) -> None:
        """The requests, and the paired clients if shown, as stored now (a request answered
        with `lmsp-desktop pairing …`, a token made or revoked with `lmsp-desktop token …`
        meanwhile): small queries; only what changed is applied."""
        try:
            await self.reload_pending()
            if clients:
                await self.model.reload()
        except LmspError:
            return  # the store closing, or busy: the next look tries again

    # -- paired clients ----------------------------------------------------------------------
    def selected(self) -> dict[str, Any] | None:
        rows = self.table.selectionModel().selectedRows()
        return self.model.client(rows[0].row()) if rows else None

    def _update(self) -> None:
        chosen = self.selected() is not None
        self.revoke_button.setEnabled(chosen)
        self.scopes_button.setEnabled(chosen)
        self.empty.setVisible(self.model.rowCount() == 0)

    def confirm_revoke(self) -> None:
        client = self.selected()
        if client is None:
            return
        box = QMessageBox(
            QMessageBox.Icon.Warning,
            "Revoke client",
            f"Revoke {client['name']}? Its token stops working at once; to use the service "
            "again it has to pair anew.",
            parent=self,
        )
        box.addButton("Revoke", QMessageBox.ButtonRole.AcceptRole)
        box.addButton("Keep", QMessageBox.ButtonRole.RejectRole)
        box.accepted.connect(lambda: aio.spawn(self.revoke(client["id"]), self))
        self.dialog = box
        box.open()

    async def revoke(self, client_id: str) -> None:
        await self.core.revoke_client(client_id)
        await self.model.reload()

    def edit_scopes(self) -> None:
        client = self.selected()
        if client is None:
            return
        dialog = ScopeDialog(client, self)
        dialog.accepted.connect(
            lambda: aio.spawn(self.set_scopes(client["id"], dialog.scopes()), self)
        )
        self.dialog = dialog
        dialog.open()

    async def set_scopes(self, client_id: str, scopes: list[str]) -> None:
        await self.core.set_client_scopes(client_id, frozenset(scopes))
        await self.model.reload()
