"""Icons shipped inside the package (app, task states, tray), located without importing Qt."""

from __future__ import annotations

import re
from importlib.resources import files
from pathlib import Path

APP_ICON = "lmsp-desktop"
TRAY_ICONS = ("tray", "tray-busy", "tray-paused")
# Every task state has a badge named "state-<state>" (colour and shape, so it reads
# without colour too); resources/render_icons.py renders them.
STATE_NAMES = (
    "queued",
    "loading",
    "running",
    "cancelling",
    "completed",
    "incomplete",
    "failed",
    "cancelled",
)


def _icons_dir() -> Path:
    # The package is always on the file system (a normal install, an editable install or a
    # PyInstaller one-folder bundle), so the traversable is a real path Qt can open.
    return Path(str(files(__name__) / "icons"))


def icon_path(name: str, size: int | None = None) -> Path:
    """The file of icon `name`: its SVG without a size, else its PNG rendered at `size` px.

    `icon_path("lmsp-desktop", 48)`, `icon_path("state-running", 16)`, `icon_path("tray")`.
    """
    filename = f"{name}.svg" if size is None else f"{name}-{size}.png"
    path = _icons_dir() / filename
    if not path.is_file():
        sizes = ", ".join(map(str, icon_sizes(name))) or "none"
        raise FileNotFoundError(
            f"No icon {filename!r} in {path.parent}; PNG sizes of {name!r}: {sizes}. "
            "Run resources/render_icons.py after adding an icon."
        )
    return path


def icon_sizes(name: str) -> tuple[int, ...]:
    """The PNG sizes rendered for icon `name`, smallest first (for building a QIcon)."""
    pattern = re.compile(rf"{re.escape(name)}-(\d+)\.png")
    found = (pattern.fullmatch(p.name) for p in _icons_dir().iterdir())
    return tuple(sorted(int(m.group(1)) for m in found if m))


def state_icon_name(state: str) -> str:
    """The icon name for a task state, e.g. "state-running"."""
    if state not in STATE_NAMES:
        raise ValueError(f"unknown task state {state!r}; expected one of {STATE_NAMES}")
    return f"state-{state}"
