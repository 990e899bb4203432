"""Render the SVG icon sources to PNGs and copy what the app needs into the package.

Run from the repository root after editing an SVG: `.venv/bin/python resources/render_icons.py`.
It writes resources/icons/png/*.png (committed; the packaging installs them into the
hicolor theme) and mirrors the run-time set into lmsp_desktop/resources/icons/ under the
same flat names (`lmsp-desktop-48.png`, `state-running-16.png`, `tray-busy-22.png`, plus
the SVGs), which is what `lmsp_desktop.resources.icon_path` looks up.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ICONS = ROOT / "resources" / "icons"
PNG_DIR = ICONS / "png"
PACKAGE_ICONS = ROOT / "lmsp_desktop" / "resources" / "icons"

APP_SIZES = (16, 24, 32, 48, 64, 128, 256, 512)
# Below this size the full design blurs; the small source is drawn on a 16 px grid.
SMALL_SOURCE_BELOW = 32
STATES = (
    "queued",
    "loading",
    "running",
    "cancelling",
    "completed",
    "incomplete",
    "failed",
    "cancelled",
)
STATE_SIZES = (16, 24, 32, 48)
TRAYS = ("tray", "tray-busy", "tray-paused")
TRAY_SIZES = (16, 22, 24, 32, 48, 64)


def jobs() -> list[tuple[Path, str, int]]:
    """(svg source, output name without size, size) for every PNG to render."""
    out: list[tuple[Path, str, int]] = []
    for size in APP_SIZES:
        name = "lmsp-desktop-small.svg" if size < SMALL_SOURCE_BELOW else "lmsp-desktop.svg"
        out.append((ICONS / name, "lmsp-desktop", size))
    for state in STATES:
        out += [(ICONS / "states" / f"{state}.svg", f"state-{state}", s) for s in STATE_SIZES]
    for tray in TRAYS:
        out += [(ICONS / "tray" / f"{tray}.svg", tray, s) for s in TRAY_SIZES]
    return out


def svg_copies() -> list[tuple[Path, str]]:
    """(svg source, flat package name) for the scalable icons the app loads."""
    out = [(ICONS / "lmsp-desktop.svg", "lmsp-desktop.svg")]
    out += [(ICONS / "states" / f"{s}.svg", f"state-{s}.svg") for s in STATES]
    out += [(ICONS / "tray" / f"{t}.svg", f"{t}.svg") for t in TRAYS]
    return out


def render(svg: Path, size: int, target: Path) -> None:
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    renderer = QSvgRenderer(str(svg))
    if not renderer.isValid():
        raise SystemExit(f"render_icons: {svg} is not a valid SVG")
    image = QImage(size, size, QImage.Format.Format_ARGB32)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform)
    renderer.render(painter)
    painter.end()
    if not image.save(str(target), "PNG"):
        raise SystemExit(f"render_icons: could not write {target}")


def main() -> int:
    # Rendering needs a QGuiApplication but never a display.
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtGui import QGuiApplication

    app = QGuiApplication.instance() or QGuiApplication(sys.argv[:1])
    PNG_DIR.mkdir(parents=True, exist_ok=True)
    PACKAGE_ICONS.mkdir(parents=True, exist_ok=True)
    for svg, name, size in jobs():
        target = PNG_DIR / f"{name}-{size}.png"
        render(svg, size, target)
        shutil.copyfile(target, PACKAGE_ICONS / target.name)
    for svg, name in svg_copies():
        shutil.copyfile(svg, PACKAGE_ICONS / name)
    print(
        f"rendered {len(jobs())} PNGs into {PNG_DIR.relative_to(ROOT)} and "
        f"{PACKAGE_ICONS.relative_to(ROOT)}"
    )
    del app
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
