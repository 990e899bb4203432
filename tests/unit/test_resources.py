"""The icons the app loads at run time: present for every state and size, found without Qt."""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import pytest

from lmsp_desktop.core.states import TaskState
from lmsp_desktop.resources import (
    APP_ICON,
    STATE_NAMES,
    TRAY_ICONS,
    icon_path,
    icon_sizes,
    state_icon_name,
)

ROOT = Path(__file__).resolve().parents[2]
APP_SIZES = (16, 24, 32, 48, 64, 128, 256, 512)


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk (no Qt needed)."""
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    assert head[12:16] == b"IHDR"
    width, height = struct.unpack(">II", head[16:24])
    return width, height


def test_every_task_state_has_a_badge() -> None:
    assert set(STATE_NAMES) == {str(s) for s in TaskState}
    for state in TaskState:
        name = state_icon_name(str(state))
        assert icon_path(name).read_text(encoding="utf-8").lstrip().startswith("<?xml")
        for size in (16, 24, 32, 48):
            assert png_size(icon_path(name, size)) == (size, size)


def test_app_icon_has_every_size_and_an_svg() -> None:
    assert icon_sizes(APP_ICON) == APP_SIZES
    for size in APP_SIZES:
        assert png_size(icon_path(APP_ICON, size)) == (size, size)
    assert "<svg" in icon_path(APP_ICON).read_text(encoding="utf-8")


def test_tray_icons_have_panel_sizes() -> None:
    for name in TRAY_ICONS:
        assert {16, 22, 24, 32} <= set(icon_sizes(name))
        assert icon_path(name).is_file()


def test_missing_icon_says_which_sizes_exist() -> None:
    with pytest.raises(FileNotFoundError, match="16, 24, 32, 48, 64, 128, 256, 512"):
        icon_path(APP_ICON, 20)
    with pytest.raises(ValueError, match="unknown task state"):
        state_icon_name("paused")


def test_package_icons_match_the_rendered_sources() -> None:
    # render_icons.py copies resources/icons/png into the package; a PNG edited or
    # re-rendered in one place only would ship a stale icon.
    rendered = ROOT / "resources" / "icons" / "png"
    pngs = sorted(rendered.glob("*.png"))
    assert len(pngs) >= len(APP_SIZES) + 4 * len(STATE_NAMES)
    for png in pngs:
        shipped = icon_path(png.stem.rsplit("-", 1)[0], int(png.stem.rsplit("-", 1)[1]))
        assert shipped.read_bytes() == png.read_bytes(), f"{shipped} differs from {png}"
    assert (
        icon_path(APP_ICON).read_bytes()
        == (ROOT / "resources" / "icons" / "lmsp-desktop.svg").read_bytes()
    )


def test_finding_icons_does_not_import_qt() -> None:
    # The headless service and the packaging scripts use icon paths without Qt installed.
    code = (
        "import sys; from lmsp_desktop.resources import icon_path; "
        "icon_path('lmsp-desktop', 48); print('PySide6' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.strip() == "False"
