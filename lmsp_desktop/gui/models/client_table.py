"""Paired clients: name, scopes, when paired, last seen (and from where), token prefix."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QFontDatabase

from lmsp_desktop.gui.core_api import CoreApi
from lmsp_desktop.gui.format import date_time
from lmsp_desktop.gui.models.base import ROOT, Index, RowTableModel

COL_NAME, COL_SCOPES, COL_CREATED, COL_SEEN, COL_TOKEN = range(5)
HEADERS = ["Name", "Scopes", "Paired on", "Last seen", "Token"]
CLIENT_ID = Qt.ItemDataRole.UserRole + 1


class ClientTableModel(RowTableModel):
    """The clients that are not revoked, newest first."""

    headers = HEADERS

    def __init__(self, core: CoreApi, parent: Any = None) -> None:
        super().__init__(parent)
        self.core = core
        self._rows: list[dict[str, Any]] = []

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or index.row() >= len(self._rows):
            return None
        client, col = self._rows[index.row()], index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            if col == COL_NAME:
                return client["name"]
            if col == COL_SCOPES:
                return ", ".join(client["scopes"])
            if col == COL_CREATED:
                return date_time(client["created_at"])
            if col == COL_SEEN:
                if not client["last_seen_at"]:
                    return "never"
                addr = client.get("last_seen_addr")
                return date_time(client["last_seen_at"]) + (f" from {addr}" if addr else "")
            return f"{client['token_prefix']}…"
        if role == Qt.ItemDataRole.ToolTipRole and col in (COL_SCOPES, COL_SEEN):
            return self.data(index)  # elided in a narrow window
        if role == Qt.ItemDataRole.FontRole and col == COL_TOKEN:
            return QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        if role == CLIENT_ID:
            return client["id"]
        return None

    def client(self, row: int) -> dict[str, Any]:
        return self._rows[row]

    async def reload(self) -> None:
        """Read the clients again and apply what changed: rows removed and inserted where they
        are (a selection and the scroll stay on the rows they were on; the Clients page reads
        every two seconds while shown), a changed row's cells redrawn, nothing else."""
        self.apply(await self.core.clients())

    def apply(self, rows: list[dict[str, Any]]) -> None:
        wanted = {r["id"] for r in rows}
        for at in reversed(range(len(self._rows))):
            if self._rows[at]["id"] not in wanted:
                self.beginRemoveRows(ROOT, at, at)
                del self._rows[at]
                self.endRemoveRows()
        kept = {r["id"] for r in self._rows}
        if [r["id"] for r in self._rows] != [r["id"] for r in rows if r["id"] in kept]:
            self.beginResetModel()  # another order than newest first: not from this store
            self._rows = rows
            self.endResetModel()
            return
        for at, row in enumerate(rows):
            if at < len(self._rows) and self._rows[at]["id"] == row["id"]:
                if self._rows[at] != row:  # last seen, scopes: its cells, not the table
                    self._rows[at] = row
                    self.dataChanged.emit(self.index(at, 0), self.index(at, COL_TOKEN))
                continue
            self.beginInsertRows(ROOT, at, at)
            self._rows.insert(at, row)
            self.endInsertRows()
