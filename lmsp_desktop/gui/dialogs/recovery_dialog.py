"""The recovery report: which tasks an unclean shutdown left behind and what became of them."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import (
    Qt,
    Signal,
)
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QDialogButtonBox,
    QHeaderView,
    QLabel,
    QPushButton,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from lmsp_desktop.core.views import RecoveryItem, RecoveryReport
from lmsp_desktop.gui.format import clock, human_size, short_id, state_icon
from lmsp_desktop.gui.models.base import Index, RowTableModel

COL_TASK, COL_MODEL, COL_CHANGE, COL_POLICY, COL_EVENT = range(5)
HEADERS = ["Task", "Model", "State before → after", "Policy", "What happened"]
TASK_ID = Qt.ItemDataRole.UserRole + 1


def as_report(report: RecoveryReport | dict[str, Any]) -> RecoveryReport:
    """A RecoveryReport from the startup's object or from `recovery.last_report`'s dict."""
    if isinstance(report, RecoveryReport):
        return report
    items = [RecoveryItem(**item) for item in report["items"]]
    return RecoveryReport(report["started_at"], report["finished_at"], items)


def what_happened(item: RecoveryItem) -> str:
    """The recovery of one task as a sentence (the event written is in the tooltip). A
    download (`bytes_kept` set) keeps its partial file whatever its policy: its sentence says
    what it goes on from, bytes rather than tokens."""
    download = item.bytes_kept is not None
    kept = item.bytes_kept or 0
    if item.event_type == "response.resumed":
        if download:
            on_disk = f"the {human_size(kept)} on disk" if kept else "the bytes on disk, if any"
            return f"Resumed: it continues from {on_disk}"
        if item.tokens_kept is None:  # a report stored before the count was recorded
            return "Resumed where it stopped"
        if item.tokens_kept == 0:
            return "Resumed from the start (it had not generated anything yet)"
        n = item.tokens_kept
        return f"Resumed after {n:,} token{'' if n == 1 else 's'}"
    if item.state_after == "failed":
        if download:  # how far it got, as a resumed one says it (a report before: no size)
            on_disk = f"its {human_size(kept)} on disk are" if kept else "its bytes on disk are"
            return f"Failed: the service restarted ({on_disk} kept: pull it again to go on)"
        return "Failed: the service restarted"
    if item.state_after == "cancelled":
        return "Cancelled, as was asked before the restart"
    if item.state_before == "queued":
        return "Still waiting in the queue"
    if download:
        return "Will start again, continuing from the bytes on disk"
    return "Will start again from the beginning"


# The summary's chips, in the rows' own words (a row's sentence starts with its chip's
# phrase): "5 requeued" beside three rows saying "Still waiting in the queue" read as two
# different stories, and `server_restarted` is a code, not words.
OUTCOMES = (
    "Failed: the service restarted",
    "Still waiting in the queue",
    "Will start again from the beginning",
    "Will start again, continuing",
    "Resumed",
    "Cancelled, as was asked",
)


def outcome(item: RecoveryItem) -> str:
    sentence = what_happened(item)
    return next(phrase for phrase in OUTCOMES if sentence.startswith(phrase))


def summary(items: list[RecoveryItem]) -> str:
    """One line of chips such as "3 failed: the service restarted · 2 still waiting in
    the queue · 1 resumed"."""
    counts = {phrase: 0 for phrase in OUTCOMES}
    for item in items:
        counts[outcome(item)] += 1
    return " · ".join(f"{n} {phrase[0].lower()}{phrase[1:]}" for phrase, n in counts.items() if n)


class RecoveryTableModel(RowTableModel):
    """One row per recovered task."""

    headers = HEADERS

    def __init__(self, items: list[RecoveryItem], parent: Any = None) -> None:
        super().__init__(parent)
        self._rows = list(items)

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or index.row() >= len(self._rows):
            return None
        item, col = self._rows[index.row()], index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            return (
                short_id(item.task_id),
                item.model,
                f"{item.state_before} → {item.state_after}",
                item.on_restart,
                what_happened(item),
            )[col]
        if role == Qt.ItemDataRole.DecorationRole and col == COL_CHANGE:
            return state_icon(item.state_after)
        if role == Qt.ItemDataRole.ToolTipRole and col == COL_TASK:
            return item.task_id
        if role == Qt.ItemDataRole.ToolTipRole and col == COL_MODEL:
            return item.model  # elided in its column when long (a download's repo:file)
        if role == Qt.ItemDataRole.ToolTipRole and col == COL_EVENT:
            kept = (
                f"The {item.tokens_kept:,} tokens generated before the restart were kept; "
                "generation continues after them.\n"
                if item.tokens_kept
                else ""
            )
            return f"{kept}Event written: {item.event_type} (#{item.sequence_number})"
        if role == TASK_ID:
            return item.task_id
        return None


class RecoveryDialog(QDialog):
    """Lists the recovered tasks; Show in Tasks selects one in the main window."""

    show_task = Signal(str)

    def __init__(
        self, report: RecoveryReport | dict[str, Any], parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.report = as_report(report)
        count = len(self.report.items)
        self.setWindowTitle("Recovery report")
        title = QLabel(
            f"<h3>Recovered {count} task{'s' if count != 1 else ''} {self.report.cause()}</h3>"
        )
        self.summary = QLabel(summary(self.report.items) or "Nothing needed recovery.")
        when = QLabel(
            f"At startup, {clock(self.report.started_at)}. "
            "The service is already serving while you read this."
        )
        self.model = RecoveryTableModel(self.report.items, self)
        self.table = QTableView()
        self.table.setModel(self.model)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.verticalHeader().hide()
        # Columns fit their content; the sentence of what happened takes the room left.
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(COL_EVENT, QHeaderView.ResizeMode.Stretch)
        # A download's model is repo:file, 70 characters and more: fitted whole it left the
        # sentence a sliver ("Resumed from the …"). It gets about 32 characters and wraps
        # (elided in the middle past what the row holds; whole in its tooltip), and the
        # sentence wraps too, in a row as tall as it needs.
        self.table.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.table.setWordWrap(True)
        self.table.verticalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        widest_model = self.fontMetrics().averageCharWidth() * 32
        if self.table.sizeHintForColumn(COL_MODEL) > widest_model:
            header.setSectionResizeMode(COL_MODEL, QHeaderView.ResizeMode.Interactive)
            header.resizeSection(COL_MODEL, widest_model)
        if count:
            self.table.selectRow(0)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        self.show_button = QPushButton("Show in Tasks")
        self.show_button.setEnabled(bool(count))
        buttons.addButton(self.show_button, QDialogButtonBox.ButtonRole.ActionRole)
        self.show_button.clicked.connect(self._show_selected)
        self.table.doubleClicked.connect(lambda *_: self._show_selected())
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        for widget in (title, self.summary, when, self.table, buttons):
            layout.addWidget(widget)
        self.resize(860, 420)  # every sentence whole; still fits a 900 px screen

    def _show_selected(self) -> None:
        rows = self.table.selectionModel().selectedRows()
        if rows:
            self.show_task.emit(self.model.index(rows[0].row(), 0).data(TASK_ID))
            self.accept()
