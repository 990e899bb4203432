"""How values look in the window: state badges, sizes, durations, times, short digests."""

from __future__ import annotations

import time
from functools import cache

from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QColor, QFontMetrics, QIcon, QPainter, QPixmap

# The one size formatter, shared with the CLI (Qt-free), re-exported for the window.
from lmsp_desktop.core.sizes import human_size as human_size
from lmsp_desktop.core.states import TaskState
from lmsp_desktop.core.views import TaskRow
from lmsp_desktop.resources import STATE_NAMES, icon_path, icon_sizes, state_icon_name

# Mid-tone colours stay readable as dots on both light and dark palettes; the word is always
# shown next to the dot, so colour is never the only signal.
STATE_COLOURS: dict[str, str] = {
    TaskState.QUEUED: "#8c8c8c",
    TaskState.LOADING: "#3d85e0",
    TaskState.RUNNING: "#3d85e0",
    TaskState.CANCELLING: "#e0a100",
    TaskState.COMPLETED: "#2fa84f",
    TaskState.INCOMPLETE: "#e0a100",
    TaskState.FAILED: "#e04848",
    TaskState.CANCELLED: "#6e6e6e",
}


@cache
def dot_icon(colour: str, size: int = 12, hollow: bool = False) -> QIcon:
    """A round coloured dot, the badge in front of a state word."""
    pixmap = QPixmap(size, size)
    pixmap.fill(Qt.GlobalColor.transparent)
    painter = QPainter(pixmap)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.setPen(QColor(colour))
    if hollow:
        painter.setBrush(Qt.BrushStyle.NoBrush)
    else:
        painter.setBrush(QColor(colour))
    painter.drawEllipse(2, 2, size - 4, size - 4)
    painter.end()
    icon = QIcon(pixmap)
    icon.addPixmap(_on_white_disc(pixmap), QIcon.Mode.Selected)  # visible on a selection
    return icon


@cache
def state_icon(state: str) -> QIcon:
    """The packaged badge of a state (colour and shape). On a selected row the badge sits on
    a white disc: a blue badge on a blue selection would otherwise vanish."""
    if state not in STATE_NAMES:
        return dot_icon(STATE_COLOURS.get(state, "#8c8c8c"))
    name = state_icon_name(state)
    icon = QIcon()
    for size in icon_sizes(name):
        badge = QPixmap(str(icon_path(name, size)))
        icon.addPixmap(badge, QIcon.Mode.Normal)
        icon.addPixmap(_on_white_disc(badge), QIcon.Mode.Selected)
    return icon


def _on_white_disc(badge: QPixmap) -> QPixmap:
    size = badge.width()
    pixmap = QPixmap(size, size)
    pixmap.fill(Qt.GlobalColor.transparent)
    painter = QPainter(pixmap)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform)
    painter.setPen(Qt.PenStyle.NoPen)
    painter.setBrush(QColor("#ffffff"))
    painter.drawEllipse(QRectF(0, 0, size, size))
    inset = size * 0.12
    painter.drawPixmap(
        QRectF(inset, inset, size - 2 * inset, size - 2 * inset), badge, badge.rect()
    )
    painter.end()
    return pixmap


def app_icon(name: str = "lmsp-desktop") -> QIcon:
    """A packaged icon with every rendered size (the window, the tray)."""
    icon = QIcon()
    for size in icon_sizes(name):
        icon.addFile(str(icon_path(name, size)))
    return icon


def state_word(state: str, queue_position: int | None = None) -> str:
    if state == TaskState.CANCELLING:
        return "cancelling…"
    if state == TaskState.QUEUED and queue_position:
        return f"queued #{queue_position}"
    return str(state)


def why_incomplete(reason: str | None, limit: int | None, output_tokens: int) -> str:
    """Why an `incomplete` task stopped, in words to follow its state ("incomplete — …"). The
    store says `max_output_tokens` for both ends of room (OpenAI's word for each): it is the
    request's limit when the output reached it, else the model's context that filled up."""
    if reason == "max_output_tokens" and limit is not None and output_tokens >= limit:
        return f"stopped at the {limit:,}-token limit"
    if reason == "max_output_tokens":
        return "the context is full"
    return f"stopped: {reason}" if reason else "stopped before its end"


def why_ended(row: TaskRow) -> str:
    """Why a task ended, where its state word alone does not say (an incomplete one's
    reason); "" otherwise."""
    if row.state != TaskState.INCOMPLETE:
        return ""
    return why_incomplete(row.incomplete_reason, row.output_limit, row.output_tokens)


def incomplete_tip(reason: str | None, limit: int | None, output_tokens: int) -> str:
    """The sentence behind `why_incomplete`, for a tooltip: what happened and what to change,
    in the words other servers' users know (finish_reason "length")."""
    words = why_incomplete(reason, limit, output_tokens)
    if words.startswith("stopped at the"):
        return (
            f"Incomplete: the output {words} the request set (max_output_tokens, max_tokens: "
            'finish_reason "length" in Chat Completions). Ask for more tokens to get the rest.'
        )
    if words == "the context is full":
        return (
            "Incomplete: the context is full, the prompt and the output filled all of the "
            'model\'s context (finish_reason "length" in Chat Completions). A shorter prompt, '
            "or a larger context in the model's settings, leaves room for more."
        )
    return f"Incomplete: {words}."


def human_duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def human_count(n: int | None) -> str:
    if n is None:
        return "—"
    if n >= 1_000_000_000:
        return f"{n / 1e9:.1f} B"
    if n >= 1_000_000:
        return f"{n / 1e6:.1f} M"
    if n >= 10_000:
        return f"{n / 1e3:.0f} k"
    return str(n)


def clock(ts: float | None, with_ms: bool = False) -> str:
    """A local time of day, with the date when it is not today."""
    if ts is None:
        return "—"
    local = time.localtime(ts)
    if time.strftime("%Y-%m-%d", local) != time.strftime("%Y-%m-%d"):
        return time.strftime("%Y-%m-%d %H:%M", local)
    text = time.strftime("%H:%M:%S", local)
    return f"{text}.{int((ts % 1) * 1000):03d}" if with_ms else text


def date_time(ts: float | None) -> str:
    return "—" if ts is None else time.strftime("%Y-%m-%d %H:%M", time.localtime(ts))


def short_digest(digest: str | None) -> str:
    """`sha256:3f9a…c21e` for display; the full digest goes into the tooltip."""
    if not digest:
        return "—"
    algo, _, hexpart = digest.partition(":")
    if not hexpart:
        algo, hexpart = "sha256", digest
    return f"{algo}:{hexpart[:4]}…{hexpart[-4:]}" if len(hexpart) > 10 else digest


def short_id(task_id: str, keep: int = 8) -> str:
    """`resp_…8f2a91c0`, and `chatcmpl-…8f2a91c0` alike: the Id column keeps one width
    whichever API made the task (full chatcmpl- ids widened it while resp_ ones were cut).
    The end is kept, not the start: an id starts with its creation time (core/ids.py), the
    same for every task made within a minute; its last digits are random and tell it apart,
    and people comparing long ids look at their ends."""
    cut = min((i for i in (task_id.find("_"), task_id.find("-")) if i >= 0), default=-1)
    prefix, rest = task_id[: cut + 1], task_id[cut + 1 :]
    return f"{prefix}…{rest[-keep:]}" if len(rest) > keep else task_id


def is_loopback(host: str) -> bool:
    return host in {"127.0.0.1", "::1", "localhost"} or host.startswith("127.")


def elide_path(text: str, keep_tail: str, width: int, metrics: QFontMetrics) -> str:
    """`text` in `width` pixels, elided in the middle but keeping `keep_tail` (the end that
    tells this path from others) whole; only when even that is too wide, its start goes."""
    if metrics.horizontalAdvance(text) <= width:
        return text
    if not keep_tail or not text.endswith(keep_tail):
        return metrics.elidedText(text, Qt.TextElideMode.ElideMiddle, width)
    head_room = width - metrics.horizontalAdvance(keep_tail)
    head = text[: len(text) - len(keep_tail)]
    if head_room >= metrics.horizontalAdvance(head[:1] + "…"):
        return metrics.elidedText(head, Qt.TextElideMode.ElideRight, head_room) + keep_tail
    if metrics.horizontalAdvance("…" + keep_tail) <= width:
        return "…" + keep_tail
    # The whole text elided at its start: the tail alone fitting whole came out with no "…",
    # reading as a relative path ("ana/llm/models").
    return metrics.elidedText(text, Qt.TextElideMode.ElideLeft, width)


# The window manager's icon and buttons beside a dialog's title (measured: openbox, ~110 px).
TITLE_BAR_EXTRA = 140


def title_width(title: str, metrics: QFontMetrics) -> int:
    """A dialog width whose title bar shows `title` whole (small dialogs cut it to
    "Scope…-script" and "Add a… server")."""
    return metrics.horizontalAdvance(title) + TITLE_BAR_EXTRA
