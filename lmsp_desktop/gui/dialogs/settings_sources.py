"""Settings › Model sources: which other apps' model stores are read (LM Studio, Ollama, the
Hugging Face cache), each with the folders it reads. Saved with the dialog's Save."""

from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtWidgets import QCheckBox, QLabel, QVBoxLayout, QWidget

from lmsp_desktop.core.config import Settings
from lmsp_desktop.core.models.sources import (
    HUGGINGFACE,
    LMSTUDIO,
    OLLAMA,
    SOURCE_LABELS,
    SOURCES,
    hf_cache_root,
    lmstudio_roots,
    ollama_roots,
)


def source_folders(source: str) -> list[Path]:
    """Where `source` is read from on this machine now (the environment decides, as for the
    apps themselves)."""
    home = Path.home()
    if source == LMSTUDIO:
        return lmstudio_roots(home)
    if source == OLLAMA:
        return ollama_roots(os.environ, home)
    if source == HUGGINGFACE:
        return [hf_cache_root(os.environ, home)]
    return []


def shown(path: Path) -> str:
    try:
        return str(Path("~") / path.relative_to(Path.home()))
    except ValueError:
        return str(path)


class SourcesSection(QWidget):
    """One checkbox per store, checked when it is read; the folders under each."""

    def __init__(self, settings: Settings, flags: dict[str, str], parent: QWidget | None = None):
        super().__init__(parent)
        layout = QVBoxLayout(self)
        intro = QLabel(
            "Models other apps keep are listed where they are: nothing is copied, moved or "
            "deleted. A store switched off keeps its models' digests for when it is back."
        )
        intro.setWordWrap(True)
        layout.addWidget(intro)
        self.boxes: dict[str, QCheckBox] = {}
        for source in SOURCES:
            box = QCheckBox(SOURCE_LABELS[source])
            box.setChecked(source not in settings.disabled_sources)
            folders = QLabel("\n".join(shown(p) for p in source_folders(source)))
            folders.setStyleSheet("color: palette(placeholder-text); margin-left: 24px")
            folders.setWordWrap(True)
            layout.addWidget(box)
            layout.addWidget(folders)
            self.boxes[source] = box
        flag = flags.get("disabled_sources")
        self.flag_note = QLabel(
            f"This run uses {flag} from the command line: those stores stay off until "
            "LMSP Desktop starts without it."
            if flag
            else ""
        )
        self.flag_note.setWordWrap(True)
        self.flag_note.setVisible(bool(flag))
        layout.addWidget(self.flag_note)
        layout.addStretch()

    def disabled(self) -> list[str]:
        return [s for s, box in self.boxes.items() if not box.isChecked()]
