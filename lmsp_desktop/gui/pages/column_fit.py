"""Tables that fit their width: columns as wide as their content, the useful ones stretching
into what is left, and the least needed ones hidden when the window is too narrow for all
(so a 900 px window never scrolls sideways and never cuts a column it keeps)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import cast

from PySide6.QtCore import (
    QEvent,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    Qt,
    QTimer,
    Signal,
)
from PySide6.QtGui import QHelpEvent, QResizeEvent
from PySide6.QtWidgets import (
    QHeaderView,
    QMenu,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QTableView,
    QToolTip,
    QWidget,
)

Index = QModelIndex | QPersistentModelIndex
DIGITS = str.maketrans("0123456789", "0000000000")  # UI fonts draw digits equally wide
MAX_CACHED = 4096  # measured cell shapes kept (a long-running window sees ever new texts)


class ColumnFitter(QObject):
    """Keeps `table`'s columns fitting its viewport.

    `stretch` columns share the room left over; each asks for its content width, kept
    between its (minimum, maximum) — a long folder path is then elided rather than pushing
    useful columns out. The other columns are exactly as wide as their content. When these
    do not fit, the steps of `drop_order` are taken in turn (first the least needed) until
    they do: a column number hides that column; a (column, minimum) pair narrows that column
    down to its minimum, its cells elided (an id in the middle), before a more useful column
    has to go. Columns come back when the table widens. Whatever is hidden or elided stays
    reachable elsewhere (tooltips, the details pane), so narrowing hides nothing for good.
    A column whose widest cell shrinks (a model unloaded: "loaded · 10 min" gone) is
    measured again, so a column dropped for it comes back.

    The user has the last word (the header's menu, `set_wanted`): a column they hid stays
    hidden whatever the room, and one they asked for is dropped only after every other
    column that can go (they asked for it: others make room first). With `draggable`, the
    columns that are not stretched can be dragged wider or narrower on the header: a width
    dragged (`dragged`, column → px; `dragged_changed` tells of each drag) is kept instead
    of the content's until `reset_widths`.

    Cost: this runs while a model streams (each flush changes a few rows), and the event
    loop is the service's too. Qt's own ResizeToContents (and `sizeHintForColumn`) measure
    every loaded cell on every change: 100 ms per flush with 200 rows. Here only the cells
    that changed are measured, each shape of text once (digits count as one shape), and a
    column's width is refit only when its content grew, the rows were replaced, or the cell
    that was its widest changed or went (then that column alone is measured again).
    """

    dragged_changed = Signal()  # the user dragged a column's width (see `dragged`)

    def __init__(
        self,
        table: QTableView,
        stretch: dict[int, tuple[int, int]],
        drop_order: Sequence[int | tuple[int, int]],
        *,
        draggable: bool = False,
    ) -> None:
        super().__init__(table)
        self.table = table
        self.stretch = stretch  # column → (minimum, maximum) width asked for
        self.drop_order = drop_order
        self.unwanted: set[int] = set()  # hidden by the user
        self.pinned: list[int] = []  # asked for by the user, the latest last: dropped last
        self.dragged: dict[int, int] = {}  # widths the user dragged, kept over the content's
        self._fitting = False  # the fitter's own resizes are no drag
        header = table.horizontalHeader()
        header.setStretchLastSection(False)
        mode = QHeaderView.ResizeMode
        sized = mode.Interactive if draggable else mode.Fixed
        for col in range(header.count()):
            header.setSectionResizeMode(col, mode.Stretch if col in stretch else sized)
        self._pressed = False  # the mouse held on the header: a resize now is a drag
        # Kept, not asked of the table at each event (events still come while it is deleted).
        self._header_port: QObject | None = None
        if draggable:
            header.sectionResized.connect(self._resized)
            # A double-click on a column's edge fits it to its content again.
            header.sectionHandleDoubleClicked.connect(self._fit_again)
            self._header_port = header.viewport()
            self._header_port.installEventFilter(self)
        self._content: dict[int, int] = {}  # the widest cell measured per column
        # Where each column's widest cell is (it follows rows inserted and removed): when that
        # cell narrows or goes, the column may narrow too.
        self._widest: dict[int, QPersistentModelIndex] = {}
        self._shrunk: set[int] = set()  # columns to measure again before the next fit
        self._shapes: dict[tuple[int, bool, str], int] = {}  # (column, icon, text shape) → px
        self._timer = QTimer(self, singleShot=True, interval=0)
        self._timer.timeout.connect(self._fit_due)
        table.viewport().installEventFilter(self)
        table.installEventFilter(self)  # shown again (another page was current meanwhile)
        model = table.model()
        model.modelReset.connect(self._remeasure)
        model.layoutChanged.connect(self._remeasure)
        model.rowsInserted.connect(self._rows_inserted)
        model.rowsRemoved.connect(self._rows_removed)
        model.dataChanged.connect(self._data_changed)
        self._remeasure()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self._header_port:
            if event.type() == QEvent.Type.MouseButtonPress:
                self._pressed = True
            elif event.type() == QEvent.Type.MouseButtonRelease:
                self._pressed = False
            return False
        if event.type() == QEvent.Type.Paint and self._timer.isActive():
            # A fit is due (rows came, the table was shown or resized): done now, before the
            # paint reads the widths; a frame at the old widths flashed before the columns
            # moved (the first row's "loadi…" cut, then State where the fit put it).
            self._timer.stop()
            self._fit_due()
            return False
        # Only a change of width matters (a scroll bar coming and going changes the height).
        if event.type() == QEvent.Type.Show and watched is self.table:
            self.fit_soon()
        elif event.type() == QEvent.Type.Resize and watched is not self.table:
            resize = cast(QResizeEvent, event)
            if resize.size().width() != resize.oldSize().width():
                self.fit_soon()
        elif event.type() in (QEvent.Type.FontChange, QEvent.Type.StyleChange):
            self._remeasure()
        return False

    def _resized(self, col: int, _old: int, new: int) -> None:
        """A section dragged on the header (not one the fitter sized, hid or stretched, nor
        one Qt sized itself: only a resize while the mouse is held on the header counts)."""
        if self._fitting or not self._pressed or col in self.stretch or new <= 0:
            return
        if self.table.horizontalHeader().isSectionHidden(col):
            return
        self.dragged[col] = new
        self.dragged_changed.emit()

    def _fit_again(self, col: int) -> None:
        if self.dragged.pop(col, None) is not None:
            self.dragged_changed.emit()
        self.fit()

    def reset_widths(self) -> None:
        """Every column back to its content's width (the dragged ones forgotten); refit now."""
        self.dragged.clear()
        self.fit()

    def reset(self) -> None:
        """The usual columns (none hidden or asked for by the user) at their content's width."""
        self.unwanted.clear()
        self.pinned.clear()
        self.reset_widths()

    def fit_soon(self, *_: object) -> None:
        if not self._timer.isActive():
            self._timer.start()

    def _fit_due(self) -> None:
        """The fit `fit_soon` asked for (a subclass may fit otherwise for some causes)."""
        self.fit()

    # -- measuring ---------------------------------------------------------------------------
    def _remeasure(self, *_: object) -> None:
        """All loaded rows again (rows replaced, or the font changed): widths may shrink."""
        self._shapes.clear()
        self._content = {}
        self._widest = {}
        self._shrunk.clear()
        self._measure(0, self.table.model().rowCount() - 1, 0, self.table.model().columnCount())
        self.fit_soon()

    def _rows_inserted(self, parent: Index, first: int, last: int) -> None:
        if not parent.isValid():
            self._measure(first, last, 0, self.table.model().columnCount())

    def _rows_removed(self, parent: Index, _first: int, _last: int) -> None:
        if parent.isValid():
            return
        gone = {col for col, cell in self._widest.items() if not cell.isValid()}
        if gone:
            self._shrunk |= gone
            self.fit_soon()

    def _data_changed(self, top: Index, bottom: Index, roles: Sequence[int] = ()) -> None:
        if not roles or Qt.ItemDataRole.DisplayRole in roles:
            self._measure(top.row(), bottom.row(), top.column(), bottom.column() + 1)

    def _measure(self, first: int, last: int, first_col: int, end_col: int) -> None:
        """Note the width of the cells in rows first..last, columns first_col..end_col-1;
        refit soon when one of them is wider than its column's content so far."""
        model = self.table.model()
        grew = shrank = False
        for col in range(first_col, end_col):
            widest = self._content.get(col, 0)
            holder = self._widest.get(col)
            held = holder.row() if holder is not None and holder.isValid() else -1
            at = None
            for row in range(first, last + 1):
                index = model.index(row, col)
                width = self._cell_width(index)
                if width > widest:
                    widest, grew, at = width, True, index
                elif row == held and width < widest and at is None:
                    self._shrunk.add(col)  # the widest cell narrowed: others may be less
                    shrank = True
            self._content[col] = widest
            if at is not None:
                self._widest[col] = QPersistentModelIndex(at)
                self._shrunk.discard(col)
        if grew or shrank:
            self.fit_soon()

    def _measure_again(self) -> None:
        """The columns whose widest cell narrowed or went, measured over all loaded rows."""
        model = self.table.model()
        for col in sorted(self._shrunk):
            self._content[col] = 0
            self._widest.pop(col, None)
            self._measure(0, model.rowCount() - 1, col, col + 1)
        self._shrunk.clear()

    def _cell_width(self, index: QModelIndex) -> int:
        """What the cell's delegate asks for (as `sizeHintForColumn` counts it, grid included),
        asked once per column, icon and shape of text."""
        text = index.data(Qt.ItemDataRole.DisplayRole)
        icon = index.data(Qt.ItemDataRole.DecorationRole) is not None
        key = (index.column(), icon, "" if text is None else str(text).translate(DIGITS))
        width = self._shapes.get(key)
        if width is None:
            if len(self._shapes) >= MAX_CACHED:
                self._shapes.clear()
            width = self.table.sizeHintForIndex(index).width() + int(self.table.showGrid())
            self._shapes[key] = width
        return width

    def content_width(self, col: int) -> int:
        """What a column needs to show its title and every loaded cell uncut."""
        return max(self._content.get(col, 0), self.title_width(col))

    def title_width(self, col: int) -> int:
        """What the column's title needs in the header."""
        return self.table.horizontalHeader().sectionSizeFromContents(col).width()

    # -- fitting -----------------------------------------------------------------------------
    def fit(self) -> None:
        if self._shrunk:
            self._measure_again()
        header = self.table.horizontalHeader()
        room = self.table.viewport().width()
        needed = {col: self.content_width(col) for col in range(header.count())}
        for col, (least, most) in self.stretch.items():
            needed[col] = min(max(needed[col], least), most)
        # A dragged width wins over the content's, the stretch's bounds and the narrowing
        # steps (a Name dragged to 262 px came back cut to its least after a restart): other
        # columns give way instead.
        for col, width in self.dragged.items():
            if col in needed:
                needed[col] = width
        hidden: set[int] = set(self.unwanted)
        whole = dict(needed)
        for step in self.steps():
            excess = sum(w for c, w in needed.items() if c not in hidden) - room
            if excess <= 0:
                break
            if isinstance(step, tuple):  # narrowed (elided) only as far as needed
                col, least = step
                needed[col] = max(min(least, needed[col]), needed[col] - excess)
            else:
                hidden.add(step)
        if hidden - self.unwanted:
            # A column dropped after others were cut may leave room: with the columns kept,
            # cut again from whole, in the same order, only as far as the room needs now.
            needed = whole
            for step in self.steps():
                excess = sum(w for c, w in needed.items() if c not in hidden) - room
                if excess <= 0:
                    break
                if isinstance(step, tuple):
                    col, least = step
                    needed[col] = max(min(least, needed[col]), needed[col] - excess)
        self._give_spare_room(needed, hidden, room)
        self._widen(needed, hidden, room)
        self._fitting = True
        try:
            for col in range(header.count()):
                if header.isSectionHidden(col) != (col in hidden):
                    header.setSectionHidden(col, col in hidden)
                fixed = col not in hidden and col not in self.stretch
                if fixed and header.sectionSize(col) != needed[col]:
                    header.resizeSection(col, needed[col])
        finally:
            self._fitting = False

    def _give_spare_room(self, needed: dict[int, int], hidden: set[int], room: int) -> None:
        """With no stretched column shown (Location dropped for room, Model hidden by the
        user), the room the shown columns leave goes to the last of them that the user has
        not dragged: the table ended in a blank strip (~60 px on the Models page)."""
        if any(c not in hidden for c in self.stretch):
            return
        header = self.table.horizontalHeader()
        shown = [c for c in range(header.count()) if c not in hidden]
        spare = room - sum(needed[c] for c in shown)
        takers = [c for c in shown if c not in self.dragged]
        if spare > 0 and takers:
            needed[max(takers, key=header.visualIndex)] += spare

    def _widen(self, needed: dict[int, int], hidden: set[int], room: int) -> None:
        """A subclass's last word on the widths `fit` is about to set (none here)."""

    def steps(self) -> list[int | tuple[int, int]]:
        """The drop order with the columns the user asked for moved to its end, and without
        the narrowing of a column whose width the user dragged."""
        order = [
            s
            for s in self.drop_order
            if (s[0] not in self.dragged if isinstance(s, tuple) else s not in self.pinned)
        ]
        return [*order, *(c for c in self.pinned if c in self.drop_order)]

    def set_wanted(self, col: int, wanted: bool) -> None:
        """The user shows or hides a column (the header's menu); refit now."""
        if col in self.pinned:
            self.pinned.remove(col)
        if wanted:
            self.unwanted.discard(col)
            self.pinned.append(col)
        else:
            self.unwanted.add(col)
        self.fit()

    def dropped_for_room(self) -> list[int]:
        """The columns hidden only because the table is too narrow for them."""
        return [c for c in self.hidden_columns() if c not in self.unwanted]

    def hidden_columns(self) -> list[int]:
        header = self.table.horizontalHeader()
        return [c for c in range(header.count()) if header.isSectionHidden(c)]


def column_menu(
    parent: QWidget,
    fitter: ColumnFitter,
    titles: Sequence[str],
    fixed: Collection[int] = (),
    changed: Callable[[], None] = lambda: None,
) -> QMenu:
    """A header's show/hide menu (the Tasks and Models pages'): each column but the `fixed`
    ones, ticked while shown; one hidden for lack of room says so, and ticking it makes others
    give way first; Reset columns. `changed` runs after each choice (to keep it in the
    settings)."""
    menu = QMenu(parent)
    menu.setToolTipsVisible(True)
    dropped = set(fitter.dropped_for_room())
    header = fitter.table.horizontalHeader()

    def want(col: int, on: bool) -> None:
        fitter.set_wanted(col, on)
        changed()

    def reset() -> None:
        fitter.reset()
        changed()

    for col, title in enumerate(titles):
        if col in fixed:
            continue
        action = menu.addAction(f"{title} (left out for room)" if col in dropped else title)
        if col in dropped:
            action.setToolTip("Tick it to show it: other columns give way first.")
        action.setCheckable(True)
        action.setChecked(not header.isSectionHidden(col))
        action.setData(col)
        action.toggled.connect(lambda on, c=col: want(c, on))
    menu.addSeparator()
    reset_action = menu.addAction("Reset columns")
    reset_action.setToolTip(
        "The usual columns at their content's width (widths you dragged are forgotten), "
        "the least needed left out when there is no room"
    )
    reset_action.triggered.connect(reset)
    return menu


def show_whole_text(event: QHelpEvent, view: QWidget, index: Index) -> bool:
    """A cell cut for room: its whole text first in its tooltip, then what the model's tooltip
    says of it (the delegates that cut cells call it for a cut one)."""
    tip = index.data(Qt.ItemDataRole.ToolTipRole)
    text = str(index.data(Qt.ItemDataRole.DisplayRole) or "")
    QToolTip.showText(event.globalPos(), f"{text}\n{tip}" if tip else text, view)
    return True


class ElideMiddle(QStyledItemDelegate):
    """Cells cut in the middle when narrowed: an id keeps its prefix and its last letters
    (`resp_8f2a…91c0`), which tell it apart from the others."""

    def initStyleOption(self, option: QStyleOptionViewItem, index: Index) -> None:
        super().initStyleOption(option, index)
        option.textElideMode = Qt.TextElideMode.ElideMiddle
