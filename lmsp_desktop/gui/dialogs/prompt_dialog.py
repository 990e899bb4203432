""" "Try a prompt…": sends a prompt as a background task through the same path as the API."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from PySide6.QtCore import Signal
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QPlainTextEdit,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.gui import aio

# How long an answer may be unless the user says otherwise: without a limit a chatty model
# can write until its whole context is full (LM Studio's chat also starts with a finite one).
DEFAULT_MAX_OUTPUT = 512
MAX_OUTPUT_LIMIT = 131_072


class Submit(Protocol):
    """Core.submit: creates the task, returns its id."""

    async def __call__(self, model: str, prompt: str, *, max_output_tokens: int | None) -> str: ...


def default_model(
    models: list[str], loaded_state: Callable[[str], str], last_used: str | None
) -> str | None:
    """The model the dialog starts with: one loaded now (the last used if it is one; a
    second model would be loaded beside it otherwise, perhaps a copy of the same file), else
    the last one used in this run, else the first listed."""
    loaded = [m for m in models if loaded_state(m) != "unloaded"]
    if loaded:
        return last_used if last_used in loaded else loaded[0]
    if last_used in models:
        return last_used
    return models[0] if models else None


class PromptDialog(QDialog):
    """Pick a model, write a prompt, Send: the task appears in the Tasks table."""

    submitted = Signal(str)  # the new task's id

    def __init__(
        self,
        models: list[str],
        submit: Submit,
        parent: QWidget | None = None,
        *,
        chosen: str | None = None,
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("Try a prompt")
        self.submit = submit
        self.model = QComboBox()
        self.model.addItems(models)
        if chosen in models:
            self.model.setCurrentText(chosen)
        self.prompt = QPlainTextEdit("Write a haiku about a lighthouse keeper.")
        # Tab moves on, as in any form: it typed a tab over the selected example, and every
        # further Tab another, so the keyboard never reached Model or Send.
        self.prompt.setTabChangesFocus(True)
        self.error = QLabel()
        self.error.setWordWrap(True)
        self.error.setStyleSheet("color: #e04848")
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.send = self.buttons.addButton("Send", QDialogButtonBox.ButtonRole.AcceptRole)
        self.send.setEnabled(bool(models))
        self.buttons.accepted.connect(lambda: aio.spawn(self.send_prompt(), self))
        self.buttons.rejected.connect(self.reject)
        self.max_output = QSpinBox()
        self.max_output.setRange(1, MAX_OUTPUT_LIMIT)
        self.max_output.setValue(DEFAULT_MAX_OUTPUT)
        self.max_output.setSuffix(" tokens")
        self.max_output.setToolTip(
            "The answer stops after this many tokens (the task ends incomplete), so a chatty "
            "model cannot write until its context is full."
        )
        form = QFormLayout()
        form.addRow("Model", self.model)
        form.addRow("Answer up to", self.max_output)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.prompt)
        self.hint = QLabel(
            "Ctrl+Enter sends. It runs as a background task; watch it in the Tasks table."
        )
        layout.addWidget(self.hint)
        layout.addWidget(self.error)
        layout.addWidget(self.buttons)
        if not models:
            self.error.setText(
                "No model is available yet. Add a model folder on the Models page, then try again."
            )
        # Typing goes to the prompt and replaces the example (walked under Xvfb, it went to the
        # Model box, whose popup the first space opened); Ctrl+Enter sends, as in chat apps.
        self.prompt.selectAll()
        self.prompt.setFocus()
        self.send.setToolTip("Send (Ctrl+Enter)")
        # Tab from the prompt goes on to Send (then Cancel, Model, Answer up to), as read.
        QWidget.setTabOrder(self.model, self.max_output)
        QWidget.setTabOrder(self.max_output, self.prompt)
        QWidget.setTabOrder(self.prompt, self.send)
        QWidget.setTabOrder(self.send, self.buttons.button(QDialogButtonBox.StandardButton.Cancel))
        for keys in ("Ctrl+Return", "Ctrl+Enter"):  # the main Enter key and the keypad's
            QShortcut(QKeySequence(keys), self).activated.connect(self.send.click)
        self.resize(520, 320)

    async def send_prompt(self) -> str | None:
        self.send.setEnabled(False)
        try:
            task_id = await self.submit(
                self.model.currentText(),
                self.prompt.toPlainText(),
                max_output_tokens=self.max_output.value(),
            )
        except LmspError as exc:
            self.error.setText(exc.message)
            return None
        finally:
            self.send.setEnabled(True)
        self.submitted.emit(task_id)
        self.accept()
        return task_id
