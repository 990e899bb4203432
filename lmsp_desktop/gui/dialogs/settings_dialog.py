"""Settings: port, bind address, model folders, retention, restart policy, model memory,
browser origins."""

from __future__ import annotations

import dataclasses

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QPushButton,
    QSpinBox,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from lmsp_desktop.core.config import Settings
from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.models.memory import DEFAULT_CONTEXT_CAP
from lmsp_desktop.core.states import RestartPolicy
from lmsp_desktop.gui import aio
from lmsp_desktop.gui.core_api import CoreApi
from lmsp_desktop.gui.dialogs.settings_sources import SourcesSection
from lmsp_desktop.gui.dialogs.upstreams_section import UpstreamsSection
from lmsp_desktop.gui.format import is_loopback


class SettingsDialog(QDialog):
    """Edits `Settings` and saves them through the core (which validates and applies them)."""

    saved = Signal(object)  # Settings

    def __init__(self, core: CoreApi, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Settings")
        self.core = core
        # The stored settings, not this run's: one-off command-line flags are never saved.
        self.original = settings = core.stored_settings
        flags = core.command_line
        self.host = QLineEdit(settings.host)
        self.host.textChanged.connect(self._warn)
        # Serving on the network is a visible choice, not an address to know by heart.
        self.network = QCheckBox("Let other devices on my network use it (every interface)")
        self.network.setChecked(settings.host in ("0.0.0.0", "::"))
        self.network.toggled.connect(lambda on: self.host.setText("0.0.0.0" if on else "127.0.0.1"))
        self.port = QSpinBox(minimum=0, maximum=65535, value=settings.port)
        self.folders = QListWidget()
        self.folders.addItems(settings.model_dirs)
        self.folders.setMaximumHeight(90)
        add = QPushButton("Add…")
        add.clicked.connect(self._ask_folder)
        remove = QPushButton("Remove")
        remove.clicked.connect(lambda: self.folders.takeItem(self.folders.currentRow()))
        folder_buttons = QVBoxLayout()
        folder_buttons.addWidget(add)
        folder_buttons.addWidget(remove)
        folder_buttons.addStretch()
        folder_row = QHBoxLayout()
        folder_row.addWidget(self.folders, 1)
        folder_row.addLayout(folder_buttons)
        self.retention = QDoubleSpinBox(
            minimum=0.1, maximum=3650, decimals=1, value=settings.retention_days, suffix=" days"
        )
        self.on_restart = QComboBox()
        self.on_restart.addItems([p.value for p in RestartPolicy])
        self.on_restart.setCurrentText(settings.default_on_restart)
        self.max_loaded = QSpinBox(minimum=1, maximum=16, value=settings.max_loaded_models)
        self.idle = QSpinBox(
            minimum=0, maximum=86400, value=int(settings.idle_unload_s), suffix=" s"
        )
        # 0: each model's context fitted to memory, up to 8,192 or its trained length (the
        # fitter's default cap); a number is meant: up to it, memory permitting.
        self.max_context = QSpinBox(
            minimum=0, maximum=1_048_576, singleStep=1024, value=settings.max_context
        )
        self.max_context.setSpecialValueText(f"auto (up to {DEFAULT_CONTEXT_CAP:,})")
        self.max_context.setToolTip(
            "The longest context any model gets, in tokens. Auto fits each model's context to "
            f"the memory free, up to {DEFAULT_CONTEXT_CAP:,} tokens; a model's own setting (Models "
            "page) chooses within it. Longer contexts cost memory: the Models page shows how much."
        )
        self.max_context.setSuffix(" tokens")
        self.parallel = QSpinBox(minimum=1, maximum=64, value=settings.parallel_per_model)
        self.parallel.setToolTip(
            "How many tasks one loaded model runs at the same time; more wait in its queue. "
            "They share one copy of the weights, but each holds its own KV cache (for the demo "
            "model at 8,192 tokens, 180 MiB each). Applies when the model next loads."
        )
        self.origins = QLineEdit(" ".join(settings.allowed_origins))
        self.origins.setPlaceholderText("none (e.g. http://localhost:3000)")
        self.origins.setToolTip(
            "Web pages (and web-view apps) from these origins may call the service from a "
            "browser, with a token; any other page is refused. Separate them with spaces."
        )
        self.warning = QLabel()
        self.warning.setWordWrap(True)
        form = QFormLayout()
        form.addRow("Serve", self.network)
        form.addRow("Bind address", self.host)
        form.addRow("Port", self.port)
        # The port the start-up box chose (the one set here was in use): said as what it is,
        # not as a --port flag nobody typed.
        chosen = core.chosen_port
        self.port_note = QLabel(
            ""
            if chosen is None
            else f"This run uses port {chosen[0]}, chosen at start because {chosen[1]} was in "
            "use, for this run only."
        )
        self.port_note.setWordWrap(True)
        self.port_note.setVisible(chosen is not None)
        if chosen is not None:  # a hidden row would still leave its spacing
            form.addRow("", self.port_note)
        form.addRow("Model folders", folder_row)
        # One flag a line: wrapped inside a paragraph, "--allow-origin app://obsidian.md" broke
        # at its hyphen or after "//" and no longer read as something to type.
        self.flag_note = QLabel(
            "This run uses, from the command line and for this run only:\n"
            + "".join(f"    {flag}\n" for flag in flags.values())
            + "What you save here applies when LMSP Desktop starts without those flags."
        )
        self.flag_note.setWordWrap(True)
        self.flag_note.setVisible(bool(flags))
        form.addRow("Keep finished tasks", self.retention)
        self.on_restart.setToolTip(
            "What becomes of a task left unfinished when the service restarts, unless its "
            "client chose: fail it, start it again (retry) or continue where it stopped (resume)"
        )
        form.addRow("Unfinished tasks on restart", self.on_restart)
        form.addRow("Models kept loaded", self.max_loaded)
        form.addRow("Unload idle models after", self.idle)
        form.addRow("Max context", self.max_context)
        form.addRow("Concurrent requests per model", self.parallel)
        form.addRow("Browser origins allowed", self.origins)
        self.error = QLabel()
        self.error.setWordWrap(True)
        self.error.setStyleSheet("color: #e04848")
        note = QLabel("Bind address and port take effect at the next start; tasks are kept.")
        note.setWordWrap(True)
        self.buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Save | QDialogButtonBox.StandardButton.Cancel
        )
        self.buttons.accepted.connect(lambda: aio.spawn(self.save(), self))
        self.buttons.rejected.connect(self.reject)
        # Tabs, so the dialog fits a 600 px high screen: the service's own settings, the model
        # stores read, and the upstream servers (which apply at once, not on Save).
        general = QWidget()
        general_layout = QVBoxLayout(general)
        general_layout.addLayout(form)
        general_layout.addWidget(self.flag_note)
        general_layout.addWidget(self.warning)
        general_layout.addWidget(note)
        general_layout.addStretch()
        self.upstreams = UpstreamsSection(core, self)
        self.sources = SourcesSection(settings, flags, self)
        self.tabs = QTabWidget()
        self.tabs.addTab(general, "Service")
        self.tabs.addTab(self.sources, "Model sources")
        self.tabs.addTab(self.upstreams, "Upstream servers")
        layout = QVBoxLayout(self)
        layout.addWidget(self.tabs)
        layout.addWidget(self.error)
        layout.addWidget(self.buttons)
        self._warn()

    def _warn(self) -> None:
        host = self.host.text().strip()
        self.network.blockSignals(True)
        self.network.setChecked(host in ("0.0.0.0", "::"))
        self.network.blockSignals(False)
        self.warning.setText(
            ""
            if is_loopback(host)
            else f"⚠ Binding to {host} lets other machines reach the service; only paired "
            "clients with a token get in."
        )
        self.warning.setVisible(not is_loopback(host))

    def _ask_folder(self) -> None:
        dialog = QFileDialog(self, "Add a model folder")
        dialog.setFileMode(QFileDialog.FileMode.Directory)
        dialog.fileSelected.connect(self.folders.addItem)
        dialog.open()

    def settings(self) -> Settings:
        return dataclasses.replace(
            self.original,
            host=self.host.text().strip(),
            port=self.port.value(),
            model_dirs=[self.folders.item(i).text() for i in range(self.folders.count())],
            retention_days=self.retention.value(),
            default_on_restart=self.on_restart.currentText(),
            max_loaded_models=self.max_loaded.value(),
            idle_unload_s=float(self.idle.value()),
            max_context=self.max_context.value(),
            parallel_per_model=self.parallel.value(),
            disabled_sources=self.sources.disabled(),
            allowed_origins=self.origins.text().replace(",", " ").split(),
        )

    async def save(self) -> None:
        settings = self.settings()
        self.buttons.setEnabled(False)
        try:
            await self.core.save_settings(settings)
        except LmspError as exc:
            self.error.setText(exc.message)
            return
        finally:
            self.buttons.setEnabled(True)
        self.saved.emit(settings)
        self.accept()
