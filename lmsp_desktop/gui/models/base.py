"""What every table model here shares: a private list of rows and fixed column headers."""

from __future__ import annotations

from typing import Any, ClassVar

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QPersistentModelIndex, Qt

Index = QModelIndex | QPersistentModelIndex
ROOT = QModelIndex()


class RowTableModel(QAbstractTableModel):
    """A flat table over `self._rows` with the column titles in `headers`."""

    headers: ClassVar[list[str]] = []
    # Hover text of column titles that are short for a narrow window (column → sentence).
    header_tips: ClassVar[dict[int, str]] = {}

    def __init__(self, parent: Any = None) -> None:
        super().__init__(parent)
        self._rows: list[Any] = []

    def rowCount(self, parent: Index = ROOT) -> int:
        return 0 if parent.isValid() else len(self._rows)

    def columnCount(self, parent: Index = ROOT) -> int:
        return 0 if parent.isValid() else len(self.headers)

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = 0) -> Any:
        if orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.DisplayRole:
            return self.headers[section]
        if orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.ToolTipRole:
            return self.header_tips.get(section)
        return None

    def row_at(self, index: Index) -> Any:
        """The row behind a valid index of this model, else None."""
        if not index.isValid() or index.row() >= len(self._rows):
            return None
        return self._rows[index.row()]
