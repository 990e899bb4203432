"""The details pane's header: a task's facts in exactly two lines, whatever its width, so the
tabs below never move from one task to the next (a failed upstream task's long model name and
reason wrapped to three lines and pushed them down)."""

from __future__ import annotations

import html
from dataclasses import dataclass

from PySide6.QtCore import Qt
from PySide6.QtGui import QFont, QFontMetrics, QResizeEvent
from PySide6.QtWidgets import QLabel, QSizePolicy, QWidget

SEP = " · "
REASON = " — "  # between a state and why: "incomplete — stopped at the 400-token limit"
REASON_LEAST = 6  # letters of a reason worth showing cut; fewer: the state word alone


def id_cut_short(task_id: str, first: int = 4, last: int = 8) -> str:
    """How short the id is cut before the model's name is: "resp_01a2…b987db1d", its
    prefix, its first digits and the end that tells it apart."""
    cut = min((i for i in (task_id.find("_"), task_id.find("-")) if i >= 0), default=-1)
    head = task_id[: cut + 1 + first]
    return task_id if len(head) + last >= len(task_id) else f"{head}…{task_id[-last:]}"


@dataclass(frozen=True)
class Fact:
    text: str  # plain text
    colour: str | None = None  # a coloured dot before it (the state)
    bold: bool = False


class DetailsHeader(QLabel):
    """Line one: the facts that name the task (id, model, state), then the optional ones
    (on restart, time run, restarts) while they fit; too narrow, the id is cut first, then
    the reason after the state word, the model's name last. Line two: the reason it failed (or the
    tools not offered), cut at its end; without one, the optional facts that did not fit.
    What is cut or left out is in the tooltip, whole."""

    def __init__(self, text: str, parent: QWidget | None = None) -> None:
        super().__init__(text, parent)
        self.setTextFormat(Qt.TextFormat.RichText)
        self.setWordWrap(False)
        self.setFixedHeight(self.fontMetrics().lineSpacing() * 2 + 4)
        # Its width is what the row leaves it, never its text's: laid out on one wide line at
        # 1600 px, the text held the window at 1,419 px when narrowed to 900 (a label's
        # minimum is its text). The text is refit to the width given instead.
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
        self.setMinimumWidth(120)
        self._facts: list[Fact] = []
        self._optional: list[Fact] = []
        self._second = ""

    def show_facts(self, facts: list[Fact], optional: list[Fact], second: str = "") -> None:
        self._facts, self._optional, self._second = facts, optional, second
        whole = SEP.join(f.text for f in [*facts, *optional])
        self.setToolTip(f"{whole}\n{second}" if second else whole)
        self._lay_out()

    def show_plain(self, text: str) -> None:
        """A header that is not a task's (nothing selected, loading)."""
        self._facts, self._optional, self._second = [], [], ""
        self.setToolTip("")
        self.setText(text)

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        if self._facts and event.size().width() != event.oldSize().width():
            self._lay_out()

    def _lay_out(self) -> None:
        room = self.contentsRect().width() - 2
        if room <= 40:  # not laid out yet: the resize that follows fits it
            room = 1 << 20
        facts = list(self._facts)
        line = [*facts]
        rest = list(self._optional)
        while rest and self._width([*line, rest[0]]) <= room:
            line.append(rest.pop(0))
        if self._width(line) > room and len(facts) > 1:
            # The id gives way first, in its middle, down to its prefix, a few of its first
            # digits and its end ("resp_01a2…b987db1d"): whole in the tooltip and in Copy id.
            # (The model's name went first and was cut to "s…t" at 1000 px while the whole
            # id held the line.)
            task = line[0]
            metrics = QFontMetrics(self._bold()) if task.bold else self.fontMetrics()
            floor = metrics.horizontalAdvance(id_cut_short(task.text))
            line[0] = self._cut(task, self._width(line) - room, floor)
        for i, fact in enumerate(line):  # then the reason's words after the state word
            if fact.colour and self._width(line) > room:
                line[i] = self._cut_reason(fact, self._width(line) - room)
        # The model's name last: it is what a user needs ("smoll…truct" was shown at 900 px
        # beside a whole "incomplete — stopped at the 400-token limit").
        if self._width(line) > room and len(facts) > 1:
            line[1] = self._cut(line[1], self._width(line) - room, 40)
        if self._width(line) > room:  # then the id further: its state stays whole
            line[0] = self._cut(line[0], self._width(line) - room, 80)
        text = SEP.join(self._html(f) for f in line)
        if self._second:
            elided = self.fontMetrics().elidedText(self._second, Qt.TextElideMode.ElideRight, room)
            text += "<br>" + html.escape(elided)
        elif rest:  # short facts: whatever is left of them fits the line
            text += "<br>" + SEP.join(self._html(f) for f in rest)
        self.setText(text)

    def _cut(self, fact: Fact, over: int, least: int) -> Fact:
        """`fact` cut in its middle by `over` px, to no less than `least` px."""
        metrics = QFontMetrics(self._bold()) if fact.bold else self.fontMetrics()
        whole = metrics.horizontalAdvance(fact.text)
        if over <= 0 or whole <= least:
            return fact
        kept = max(whole - over, least)
        short = metrics.elidedText(fact.text, Qt.TextElideMode.ElideMiddle, kept)
        return Fact(short, fact.colour, fact.bold)

    def _cut_reason(self, fact: Fact, over: int) -> Fact:
        """The state fact's reason ("incomplete — stopped at the 400-token limit") cut by
        `over` px at a word ("incomplete — stopped at the…": never "the 4…", a number cut
        reads as another); left out, with its dash, once a few letters are all that would be
        left. The state word stays whole."""
        state, dash, reason = fact.text.partition(REASON)
        if not dash or over <= 0:
            return fact
        metrics = self.fontMetrics()
        room = metrics.horizontalAdvance(reason) - over
        words = reason.split(" ")
        while words and metrics.horizontalAdvance(" ".join(words) + "…") > room:
            words.pop()
        if len(" ".join(words)) < REASON_LEAST:
            return Fact(state, fact.colour, fact.bold)
        return Fact(f"{state}{dash}{' '.join(words)}…", fact.colour, fact.bold)

    def _width(self, facts: list[Fact]) -> int:
        metrics, bold = self.fontMetrics(), QFontMetrics(self._bold())
        dot = metrics.horizontalAdvance("● ")
        return metrics.horizontalAdvance(SEP) * (len(facts) - 1) + sum(
            (bold if f.bold else metrics).horizontalAdvance(f.text) + (dot if f.colour else 0)
            for f in facts
        )

    def _bold(self) -> QFont:
        font = QFont(self.font())
        font.setBold(True)
        return font

    @staticmethod
    def _html(fact: Fact) -> str:
        text = html.escape(fact.text).replace(" ", "\u00a0")  # a fact never breaks inside
        if fact.bold:
            text = f"<b>{text}</b>"
        if fact.colour:
            text = f"<span style='color:{fact.colour}'>●</span> {text}"
        return text
