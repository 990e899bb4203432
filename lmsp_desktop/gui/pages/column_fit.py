"""Tables that fit their width: columns as wide as their content, the useful ones stretching
into what is left, and the least needed ones hidden when the window is too narrow for all
(so a 900 px window never scrolls sideways and never cuts a column it keeps)."""

from __future__ import annotations

from typing import cast

from PySide6.QtCore import QEvent, QObject, QTimer
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import QHeaderView, QTableView


class ColumnFitter(QObject):
    """Keeps `table`'s columns fitting its viewport.

    `stretch` columns share the room left over; each asks for its content width, kept
    between its (minimum, maximum) — a long folder path is then elided rather than pushing
    useful columns out. The other columns are exactly as wide as their content. When these
    do not fit, columns are hidden in `drop_order` (first the least needed) until they do, and come
    back when the table widens. Whatever is hidden stays reachable elsewhere (tooltips, the
    details pane), so narrowing the window hides no information for good.
    """

    def __init__(
        self,
        table: QTableView,
        stretch: dict[int, tuple[int, int]],
        drop_order: list[int],
    ) -> None:
        super().__init__(table)
        self.table = table
        self.stretch = stretch  # column → (minimum, maximum) width asked for
        self.drop_order = drop_order
        header = table.horizontalHeader()
        header.setStretchLastSection(False)
        for col in range(header.count()):
            mode = QHeaderView.ResizeMode
            header.setSectionResizeMode(
                col, mode.Stretch if col in stretch else mode.ResizeToContents
            )
        self._timer = QTimer(self, singleShot=True, interval=0)
        self._timer.timeout.connect(self.fit)
        table.viewport().installEventFilter(self)
        table.installEventFilter(self)  # shown again (another page was current meanwhile)
        model = table.model()
        for signal in (model.modelReset, model.rowsInserted, model.dataChanged):
            signal.connect(self.fit_soon)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        # Only a change of width matters (a scroll bar coming and going changes the height).
        if event.type() == QEvent.Type.Show and watched is self.table:
            self.fit_soon()
        elif event.type() == QEvent.Type.Resize and watched is not self.table:
            resize = cast(QResizeEvent, event)
            if resize.size().width() != resize.oldSize().width():
                self.fit_soon()
        return False

    def fit_soon(self, *_: object) -> None:
        if not self._timer.isActive():
            self._timer.start()

    def content_width(self, col: int) -> int:
        """What a column needs to show its title and every loaded cell uncut: what Qt gives a
        ResizeToContents section (measured, since a section's own size lags until the next
        layout and a hidden one has none)."""
        header = self.table.horizontalHeader()
        return max(self.table.sizeHintForColumn(col), header.sectionSizeFromContents(col).width())

    def fit(self) -> None:
        header = self.table.horizontalHeader()
        room = self.table.viewport().width()
        needed = {col: self.content_width(col) for col in range(header.count())}
        for col, (least, most) in self.stretch.items():
            needed[col] = min(max(needed[col], least), most)
        hidden: set[int] = set()
        for col in self.drop_order:
            if sum(w for c, w in needed.items() if c not in hidden) <= room:
                break
            hidden.add(col)
        for col in range(header.count()):
            if header.isSectionHidden(col) != (col in hidden):
                header.setSectionHidden(col, col in hidden)

    def hidden_columns(self) -> list[int]:
        header = self.table.horizontalHeader()
        return [c for c in range(header.count()) if header.isSectionHidden(c)]
