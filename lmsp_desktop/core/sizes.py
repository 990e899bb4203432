"""Byte counts as people read them, in one system for the window and the CLI alike: binary
units named as such (KiB, MiB, GiB), the units of the memory estimates. Qt-free, so the CLI
uses it too (`models pull` printed "0.8 / 3.1 MB" where the window said "768.0 KiB / 3.0 MiB")."""

from __future__ import annotations


def human_size(n: int | float | None) -> str:
    """Sizes in binary units named as such (MiB, GiB), the units of the memory estimates:
    one system everywhere (the window mixed "98.0 MB" files with "180 MiB" caches)."""
    if n is None:
        return "—"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"
