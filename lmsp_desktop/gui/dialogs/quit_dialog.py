"""Quitting with tasks unfinished is a decision: wait for them, quit now, or cancel them."""

from __future__ import annotations

from collections import Counter

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QLabel,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from lmsp_desktop.core.views import TaskRow

# What the next start does with an unfinished task (chapter 11, table 11.3), by what the
# task was doing and its on_restart policy: a task that never started has nothing to redo.
AT_NEXT_START = {
    "failed": "{n} will be marked failed",
    "over": "{n} will start over from the beginning",
    "resume": "{n} will resume where {it} stopped",
    "queue": "{n} will wait in the queue again",
    "cancelled": "{n} will end as cancelled",
}


def outcome(row: TaskRow) -> str:
    """Which AT_NEXT_START line a task falls under."""
    if row.state == "cancelling":
        return "cancelled"
    if row.on_restart == "fail":
        return "failed"
    if row.state != "running":  # queued or loading: it waits for its turn again
        return "queue"
    return "resume" if row.on_restart == "resume" else "over"


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def consequences(rows: list[TaskRow]) -> str:
    """ "At the next start, 1 will be marked failed and 2 will start over…" by table 11.3."""
    counts = Counter(outcome(r) for r in rows)
    parts = [
        line.format(n=counts[key], it="it" if counts[key] == 1 else "they")
        for key, line in AT_NEXT_START.items()
        if counts[key]
    ]
    if set(counts) == {"cancelled"}:
        return "They are being cancelled and will end as cancelled."
    text = ", ".join(parts[:-1]) + (" and " if len(parts) > 1 else "") + parts[-1]
    return f"If you quit now, at the next start {text} (as each task's restart policy says)."


class QuitDialog(QDialog):
    """Asks what to do with unfinished tasks; `chosen` says "wait", "now" or "cancel".

    While waiting it stays open with a progress line (`set_left`), and still offers Quit now
    and Keep running; "Keep running" (or closing the dialog) emits `chosen("keep")`.
    """

    chosen = Signal(str)

    def __init__(self, rows: list[TaskRow], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Quit LMSP Desktop")
        self.waiting = False
        self.title = QLabel()
        self.body = QLabel()
        self.body.setWordWrap(True)
        self.show_rows(rows)
        self.progress = QLabel()
        self.progress.setWordWrap(True)
        self.progress.hide()
        self.buttons = QDialogButtonBox()
        self.wait_button = self._button("Wait for them", "wait")
        self.wait_button.setToolTip("Refuse new work, let these tasks finish, then quit")
        self.now_button = self._button("Quit now", "now")
        self.cancel_button = self._button("Cancel them and quit", "cancel")
        self.keep_button = QPushButton("Keep running")
        self.buttons.addButton(self.keep_button, QDialogButtonBox.ButtonRole.RejectRole)
        self.keep_button.setDefault(True)
        self.buttons.rejected.connect(self.reject)
        self.rejected.connect(lambda: self.chosen.emit("keep"))
        layout = QVBoxLayout(self)
        for widget in (self.title, self.body, self.progress, self.buttons):
            layout.addWidget(widget)
        self.setMinimumWidth(480)

    def show_rows(self, rows: list[TaskRow]) -> None:
        """The question about these unfinished tasks: kept current while it is open, since
        tasks go on ending and starting behind it."""
        states = Counter(r.state for r in rows)
        detail = ", ".join(
            f"{states[s]} {s}" for s in ("running", "loading", "queued", "cancelling") if states[s]
        )
        self.title.setText(f"<b>{plural(len(rows), 'task')} unfinished</b> ({detail}).")
        if not self.waiting:
            self.body.setText(consequences(rows))

    def _button(self, text: str, choice: str) -> QPushButton:
        button = QPushButton(text)
        self.buttons.addButton(button, QDialogButtonBox.ButtonRole.ActionRole)
        button.clicked.connect(lambda: self._choose(choice))
        return button

    def _choose(self, choice: str) -> None:
        if choice == "wait":
            self.waiting = True
            self.wait_button.hide()
            self.cancel_button.hide()
            self.body.setText(
                "Waiting for them to finish; new requests are refused meanwhile. "
                "LMSP Desktop quits when the last one ends."
            )
            self.progress.show()
            self.adjustSize()  # the longer text and the progress line need the height
        else:
            self.accept()
        self.chosen.emit(choice)

    def set_left(self, left: int) -> None:
        """The progress line while waiting."""
        self.progress.setText(f"{plural(left, 'task')} left…")
