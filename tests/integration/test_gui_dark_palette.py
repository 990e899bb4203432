"""The sidebar's headings (SERVICE, TASKS, LOADED MODELS, RECENT) stay readable in a dark
palette as in a light one (GUI.md: "text stays readable in both"). A walk under Adwaita dark
found them nearly invisible: they were painted in `palette(mid)`, a frame shade about the
window's own colour there. Real core, real MainWindow under a dark QPalette as a dark desktop
theme gives it (the colours Qt derives from a dark button), the headings' real pixels."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QApplication

from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.gui.pages.sidebar import Heading
from tests.integration.gui_windows import open_app

pytestmark = pytest.mark.gui


def dark_palette() -> QPalette:
    """What a dark desktop theme hands Qt: dark window and buttons, light text; Light, Mid and
    Dark derived from the button colour, as Qt does."""
    palette = QPalette(QColor("#353535"), QColor("#242424"))  # button, window
    for role in (QPalette.ColorRole.WindowText, QPalette.ColorRole.Text):
        palette.setColor(role, QColor("#ffffff"))
    palette.setColor(QPalette.ColorRole.ButtonText, QColor("#ffffff"))
    palette.setColor(QPalette.ColorRole.Base, QColor("#1e1e1e"))
    return palette


@pytest.fixture
def dark() -> Iterator[None]:
    app = QApplication.instance()
    assert isinstance(app, QApplication)
    before = app.palette()
    app.setPalette(dark_palette())
    try:
        yield
    finally:
        app.setPalette(before)


def luminance(colour: QColor) -> float:
    def channel(c: float) -> float:
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (channel(c) for c in (colour.redF(), colour.greenF(), colour.blueF()))
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a: QColor, b: QColor) -> float:
    high, low = sorted((luminance(a), luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def text_contrast(widget: Any) -> float:
    """The contrast of the widget's most distinct pixel (a glyph's core) against its most
    common one (the background), as painted."""
    image = widget.grab().toImage()
    pixels = Counter(image.pixel(x, y) for x in range(image.width()) for y in range(image.height()))
    background = QColor.fromRgb(pixels.most_common(1)[0][0])
    return max(contrast(QColor.fromRgb(p), background) for p in pixels)


async def headings_contrast(qtbot: Any, data: Path) -> dict[str, float]:
    async with open_app(qtbot, data, engine=FakeEngine()) as (_core, window):
        headings = window.sidebar.findChildren(Heading)
        assert [h.text() for h in headings] == ["SERVICE", "TASKS", "LOADED MODELS", "RECENT"]
        return {h.text(): text_contrast(h) for h in headings}


async def test_sidebar_headings_are_readable_in_a_dark_palette(
    dark: None, qtbot: Any, tmp_path: Path
) -> None:
    seen = await headings_contrast(qtbot, tmp_path)
    # WCAG's 4.5:1 for text (palette(mid) measured about 1:1 here).
    assert all(ratio >= 4.5 for ratio in seen.values()), seen


async def test_sidebar_headings_are_readable_in_a_light_palette(qtbot: Any, tmp_path: Path) -> None:
    seen = await headings_contrast(qtbot, tmp_path)
    assert all(ratio >= 4.5 for ratio in seen.values()), seen
