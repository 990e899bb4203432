""" "Connect a client…": make a token here (shown once) and copy a snippet that works as pasted."""

from __future__ import annotations

import shiboken6
from PySide6.QtCore import QTimer, Signal
from PySide6.QtGui import QFontDatabase, QGuiApplication
from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.scopes import ADMIN, DEFAULT_SCOPES, SCOPES
from lmsp_desktop.gui import aio
from lmsp_desktop.gui.addresses import local_url, reachable_url
from lmsp_desktop.gui.core_api import CoreApi
from lmsp_desktop.gui.dialogs.prompt_dialog import default_model
from lmsp_desktop.gui.snippets import DEMO, Named, connect_snippets


def snippets(
    base: str,
    token: str,
    scopes: frozenset[str] = frozenset(DEFAULT_SCOPES),
    model: Named = DEMO,
) -> dict[str, str]:
    """Ready-to-paste snippets, by tab title. `base` is the service URL with /v1."""
    return connect_snippets(base, token, scopes, model)


async def snippet_model(core: CoreApi) -> Named | None:
    """The model the snippets name, as Try a prompt… picks one: the one loaded now, else the
    first listed (None: no model to run); with the context it runs with (or would, loaded
    now) and its trained length, as GET /v1/models tells them."""
    models = [m for m in await core.models() if m.runnable]
    chosen = default_model([m.id for m in models], core.model_loaded_state, None)
    if chosen is None:
        return None
    info = next(m for m in models if m.id == chosen)
    try:
        plan = await core.memory_plan(chosen, await core.model_settings(chosen))
    except LmspError:  # gone since it was listed: its name, its contexts unknown
        return Named(chosen)
    if plan is None:  # an upstream's model: the context its catalog tells, if any
        return Named(chosen, info.context_length, info.context_length)
    return Named(chosen, plan.context_length, plan.trained_context)


class ConnectDialog(QDialog):
    """Name a client, pick its scopes, Create: its token is shown once with snippets."""

    created = Signal(str)  # the client's name

    def __init__(self, core: CoreApi, base_url: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Connect a client")
        self.core = core
        self.root = local_url(base_url)  # never 0.0.0.0
        self.base = f"{self.root}/v1"
        remote = reachable_url(base_url, core.settings.host)
        self.elsewhere = (
            f"<br>Other devices on the network: <b>{remote}/v1</b> (Anthropic, Ollama: "
            f"<b>{remote}</b>)"
            if remote
            else ""
        )
        self.token = ""
        self.model = DEMO  # the demo's name until the service's list is read
        self.model_known = False
        self._naming = 0  # the latest look-up of the model to name (a newer one wins)
        self.name = QLineEdit("my-app")
        self.scope_boxes: dict[str, QCheckBox] = {}
        scope_row = QHBoxLayout()
        for scope in SCOPES:
            box = QCheckBox(scope)
            box.setChecked(scope in DEFAULT_SCOPES)
            box.toggled.connect(lambda _=False: self._show_snippets())
            if scope == ADMIN:
                box.setStyleSheet("QCheckBox { color: #e04848; }")
                box.setToolTip("Manages every client's tasks, other clients and the settings")
            self.scope_boxes[scope] = box
            scope_row.addWidget(box)
        self.create_button = QPushButton("Create token")
        self.create_button.clicked.connect(lambda: aio.spawn(self.create_token(), self))
        form = QFormLayout()
        form.addRow("Client name", self.name)
        form.addRow("Scopes", scope_row)
        self.error = QLabel()
        self.error.setStyleSheet("color: #e04848")
        self.token_line = QLineEdit(readOnly=True)
        mono = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        self.token_line.setFont(mono)
        self.token_line.setPlaceholderText("The token appears here, once.")
        self.copy_token = QPushButton("Copy token")
        self.copy_token.setEnabled(False)
        self.copy_token.clicked.connect(lambda: self._copy(self.token, self.copy_token))
        token_row = QHBoxLayout()
        token_row.addWidget(self.token_line, 1)
        token_row.addWidget(self.copy_token)
        # As many lines before and after Create token: the snippet tabs never move under a
        # click aimed at them, and each URL keeps a line of its own (it wrapped after "http://").
        self.note = QLabel(
            self._urls() + "Create a token for the snippets below, or use one you already have."
        )
        self.note.setWordWrap(True)  # a narrow dialog wraps the note, never widens
        self.tabs = QTabWidget()
        self.views: dict[str, QPlainTextEdit] = {}
        for title in snippets(self.base, "$LMSP_TOKEN"):
            view = QPlainTextEdit(readOnly=True)
            view.setFont(mono)
            view.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
            self.views[title] = view
            self.tabs.addTab(view, title)
        self.copy_snippet = QPushButton("Copy snippet")
        self.copy_snippet.clicked.connect(
            lambda: self._copy(self.current_snippet(), self.copy_snippet)
        )
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.addButton(self.copy_snippet, QDialogButtonBox.ButtonRole.ActionRole)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.create_button)
        layout.addWidget(self.error)
        layout.addLayout(token_row)
        layout.addWidget(self.note)
        layout.addWidget(self.tabs, 1)
        layout.addWidget(buttons)
        self._show_snippets()
        aio.spawn(self._name_model(), self)
        # Fits a 900×600 screen with its frame; a tab title out of view scrolls into it.
        self.resize(880, 560)

    def _urls(self) -> str:
        """Which base URL is for which family: a base URL with /v1 given to Claude Code gets
        only Claude Code's own words ("There's an issue with the selected model")."""
        return (
            f"Base URL for OpenAI-compatible clients: <b>{self.base}</b><br>"
            f"For Anthropic clients (Claude Code) and Ollama clients, the root without /v1: "
            f"<b>{self.root}</b>{self.elsewhere}<br>"
        )

    def on_loaded_changed(self, _states: object = None) -> None:
        """A model was loaded or unloaded while the dialog is open (the window's bridge, as
        the Models page hears it): the snippets name the model as the dialog would now."""
        aio.spawn(self._name_model(), self)

    async def _name_model(self) -> None:
        self._naming += 1
        asked = self._naming
        chosen = await snippet_model(self.core)
        if not shiboken6.isValid(self) or asked != self._naming:
            return  # closed meanwhile, or a later load or unload asked again
        if chosen is not None:
            self.model = chosen
        self.model_known = True
        self._fill(self.token or "$LMSP_TOKEN")

    def _show_snippets(self) -> None:
        """The snippets for the token (once made: its scopes) or for the ticked scopes."""
        if self.token:
            return  # the token's scopes are fixed; ticking boxes afterwards changes nothing
        self._fill("$LMSP_TOKEN")

    def _fill(self, token: str) -> None:
        """Each tab's snippet; the tab shown and each box's scroll position stay where the
        user left them (a model loaded meanwhile refills them under the reader's eyes)."""
        for title, text in snippets(self.base, token, self.scopes(), self.model).items():
            view = self.views[title]
            if view.toPlainText() == text:
                continue
            bars = (view.verticalScrollBar(), view.horizontalScrollBar())
            at = [bar.value() for bar in bars]
            view.setPlainText(text)
            for bar, value in zip(bars, at, strict=True):
                bar.setValue(value)

    def scopes(self) -> frozenset[str]:
        return frozenset(s for s, box in self.scope_boxes.items() if box.isChecked())

    def current_snippet(self) -> str:
        return self.views[self.tabs.tabText(self.tabs.currentIndex())].toPlainText()

    async def create_token(self) -> str | None:
        self.create_button.setEnabled(False)
        try:
            token = await self.core.create_client_token(self.name.text(), self.scopes())
        except LmspError as exc:
            self.error.setText(exc.message)
            self.create_button.setEnabled(True)
            return None
        self.token = token
        self.error.setText("")
        self.token_line.setText(token)
        self.copy_token.setEnabled(True)
        self.note.setText(
            self._urls()
            + "Copy the token now: it is shown only this once (the service keeps only its hash)."
        )
        self._fill(token)
        self.created.emit(self.name.text())
        return token

    def _copy(self, text: str, button: QPushButton) -> None:
        QGuiApplication.clipboard().setText(text)
        label = button.text()
        button.setText("Copied ✓")
        QTimer.singleShot(1500, button, lambda: button.setText(label))
