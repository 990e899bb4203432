"""The selected model's load settings on the Models page, with what loading it will take.

Context, concurrent requests, KV cache type and GPU layers, and the memory estimate against
the memory free: green when it fits, amber when tight, red with the reason when it will not.
The estimate follows every change at once (before anything is loaded); Save stores the
settings, which apply at the model's next load. Changes not saved yet are kept per model while
the user looks at another one (selecting a row to compare must not throw them away); Revert
shows the saved settings again. Save is offered only while the fields differ from what is
stored; a change stored elsewhere (`lmsp-desktop models set` while the window is open) shows
within a second, so a click on Save never writes stale values over it. A file that can never
run offers no field to edit."""

from __future__ import annotations

import asyncio

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import (
    QComboBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSizePolicy,
    QSpinBox,
    QWidget,
)

from lmsp_desktop.core.engines.base import ALL_LAYERS, KV_TYPES, KvType
from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.models.memory import (
    AUTO_CONTEXT_RULE,
    DEFAULT_CONTEXT_CAP,
    ModelSettings,
    Plan,
    auto_context_top,
    gib,
)
from lmsp_desktop.gui import aio
from lmsp_desktop.gui.core_api import CoreApi

# The verdict as a coloured dot and a word (never colour alone).
VERDICTS = {
    "fits": ("#2e7d32", "fits"),
    "tight": ("#b26a00", "tight"),
    "wont_fit": ("#c62828", "will not fit"),
}
GPU_AUTO, GPU_ALL, GPU_NONE, GPU_NUMBER = "auto", "all", "none (CPU)", "a number:"
NOTHING_SELECTED = "Select a model on this machine to see what loading it takes and to change it."
# How often the shown model's stored settings are read again: the CLI writes the store from
# another process, which tells this one nothing (one indexed row read; only while shown).
WATCH_MS = 1000
CHANGED_ELSEWHERE = (
    "The saved settings changed outside this window (`lmsp-desktop models set`?): shown now."
)


class ModelMemoryPanel(QGroupBox):
    """Edits one local model's settings and shows their cost before the model is loaded."""

    def __init__(self, core: CoreApi, parent: QWidget | None = None) -> None:
        super().__init__("Load settings", parent)
        self.core = core
        self.model_id: str | None = None
        self.context = QSpinBox(minimum=0, maximum=1 << 22, singleStep=1024)
        self.context.setSuffix(" tokens")
        # "4,096 tokens" as the table beside it writes the context (it said "4096 tokens");
        # typed digits without the separator are still read.
        self.context.setGroupSeparatorShown(True)
        self.context.setToolTip(
            f"Tokens per request. Auto (0) runs with {AUTO_CONTEXT_RULE}. "
            "Runs with shows what this model gets."
        )
        self._show_auto(None)
        self.parallel = QSpinBox(minimum=0, maximum=64)
        self.parallel.setSpecialValueText("default")
        self.kv_type = QComboBox()
        self.kv_type.addItems(list(KV_TYPES))
        self.kv_type.setToolTip("q8_0 takes about half the memory of f16 (uses flash attention)")
        self.gpu_mode = QComboBox()
        self.gpu_mode.addItems([GPU_AUTO, GPU_ALL, GPU_NONE, GPU_NUMBER])
        self.gpu_layers = QSpinBox(minimum=1, maximum=999)
        self.gpu_layers.setEnabled(False)
        gpu = QHBoxLayout()
        gpu.addWidget(self.gpu_mode)
        gpu.addWidget(self.gpu_layers)
        gpu.addStretch()
        self.runs_with = QLabel(NOTHING_SELECTED)
        self.estimate = QLabel()
        self.estimate.setWordWrap(True)
        self.saved = QLabel()
        self.saved.setWordWrap(True)
        self.save_button = QPushButton("Save")
        self.save_button.clicked.connect(lambda: aio.spawn(self.save(), self))
        self.revert_button = QPushButton("Revert")
        self.revert_button.setToolTip("Show the saved settings again")
        self.revert_button.setEnabled(False)
        self.revert_button.clicked.connect(lambda: aio.spawn(self.revert(), self))
        self._drafts: dict[str, ModelSettings] = {}  # each model's changes not saved yet
        # Whose values the controls hold: while the next model's settings are read, they
        # still hold the last one's, and an edit then is that model's (not the next one's).
        self._shown: str | None = None
        form = QFormLayout(self)
        # The controls keep their natural width (a context spin box across a wide window
        # reads as a text field); the two lines of facts take the rest and wrap.
        letters = self.fontMetrics().averageCharWidth()
        for control in (self.context, self.parallel, self.kv_type):
            control.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Fixed)
        self.context.setMinimumWidth(letters * 26)
        self.parallel.setMinimumWidth(letters * 12)
        self.runs_with.setWordWrap(True)
        form.addRow("Context", self.context)
        form.addRow("Concurrent requests", self.parallel)
        form.addRow("KV cache type", self.kv_type)
        form.addRow("GPU layers", gpu)
        form.addRow("Runs with", self.runs_with)
        form.addRow("Memory", self.estimate)
        buttons = QHBoxLayout()
        buttons.addWidget(self.save_button)
        buttons.addWidget(self.revert_button)
        buttons.addWidget(self.saved, 1)
        form.addRow(buttons)
        for spin in (self.context, self.parallel, self.gpu_layers):
            spin.valueChanged.connect(self._changed)
        for combo in (self.kv_type, self.gpu_mode):
            combo.currentIndexChanged.connect(self._changed)
        self._filling = False
        # The shown model's settings as stored when last read: Save is offered only for
        # something else, and a change stored elsewhere is noticed against them.
        self.stored: ModelSettings | None = None
        self._saving = False
        self._watch = QTimer(self, interval=WATCH_MS)
        self._watch.timeout.connect(self._watch_stored)
        self._watch.start()
        self._watch_task: asyncio.Task[None] | None = None
        # Why the selected file can never run (not a model the engine can load), as the
        # registry says: no estimate then, and no settings to save.
        self.cannot_run: str | None = None
        self._estimating: asyncio.Task[None] | None = None
        self.last_plan: Plan | None = None
        self.setEnabled(False)
        self._update_save()

    def _editors(self) -> tuple[QWidget, ...]:
        return (self.context, self.parallel, self.kv_type, self.gpu_mode)

    def _update_save(self) -> None:
        """Save only when the fields say something else than the store, for a file that can
        run; Revert only when there is something to revert to."""
        shown = self._shown is not None and self._shown == self.model_id
        differs = shown and self.stored is not None and self.settings() != self.stored
        can_run = self.cannot_run is None
        self.save_button.setEnabled(can_run and differs and not self._saving)
        if not can_run:
            self.save_button.setToolTip(
                "Nothing to save: this file is not a model the engine can load, so it never "
                "runs. Replace it with a complete .gguf file."
            )
        elif shown and not differs:
            self.save_button.setToolTip("Nothing to save: these are the saved settings.")
        else:
            self.save_button.setToolTip("")
        self.revert_button.setEnabled(can_run and shown and self._shown in self._drafts)
        for editor in self._editors():
            editor.setEnabled(can_run)
        self.gpu_layers.setEnabled(can_run and self.gpu_mode.currentText() == GPU_NUMBER)

    def set_watching(self, watching: bool) -> None:
        """Read the stored settings again every second while the window is shown."""
        if watching:
            self._watch.start()
            self._watch_stored()
        else:
            self._watch.stop()

    def _watch_stored(self) -> None:
        if self._watch_task is not None and not self._watch_task.done():
            return
        if self._shown is None or self._shown != self.model_id or not self.isVisible():
            return
        self._watch_task = aio.spawn(self.follow_stored(), self)

    async def follow_stored(self) -> None:
        """Show the settings stored now when they changed since read (and nothing is being
        saved from here): the fields follow unless the user has changes not saved yet."""
        model_id = self._shown
        if model_id is None or self._saving:
            return
        try:
            stored = await self.core.model_settings(model_id)
        except LmspError:
            return  # the store is closing; the next look tries again
        if model_id != self._shown or model_id != self.model_id or self._saving:
            return
        if stored == self.stored:
            return
        self.stored = stored
        draft = self._drafts.get(model_id)
        if draft is None or draft == stored:
            self._drafts.pop(model_id, None)
            self._fill(stored)
            self.saved.setText(CHANGED_ELSEWHERE)
            self._update_save()
            await self.refresh()
        else:
            self.saved.setText(
                "Not saved yet; the saved settings changed meanwhile (Revert shows them)."
            )
            self._update_save()

    # -- which model ---------------------------------------------------------------------
    async def show_model(self, model_id: str | None) -> None:
        """Show `model_id`'s stored settings and their estimate (None: nothing selected)."""
        self.model_id = model_id
        self.saved.clear()
        self.setTitle(f"Load settings: {model_id}" if model_id else "Load settings")
        if model_id is None:
            self._show_auto(None)
            # Greyed out with the last model's values, the panel read as this model's (or the
            # defaults); it shows the defaults and says what to do instead.
            self._fill(ModelSettings())
            self._shown = None
            self.stored = None
            self._update_save()
            self.setEnabled(False)
            self.runs_with.setText(NOTHING_SELECTED)
            self.estimate.clear()
            self.last_plan = None
            return
        stored = await self.core.model_settings(model_id)
        if model_id != self.model_id:
            return  # another row was selected meanwhile
        draft = self._drafts.get(model_id)
        if draft is not None and draft != stored:
            self._fill(draft)
            self.saved.setText("Not saved yet: your changes from before (Revert shows the saved).")
        else:
            self._drafts.pop(model_id, None)
            self._fill(stored)
        self._shown = model_id
        self.stored = stored
        self._update_save()
        self.setEnabled(True)
        await self.refresh()

    async def revert(self) -> None:
        """Drop the changes not saved yet: the saved settings again."""
        if self.model_id is not None:
            self._drafts.pop(self.model_id, None)
            await self.show_model(self.model_id)

    def _fill(self, settings: ModelSettings) -> None:
        self._filling = True
        try:
            self.context.setValue(settings.context_length or 0)
            self.parallel.setValue(settings.parallel or 0)
            self.kv_type.setCurrentText(settings.kv_type)
            layers = settings.gpu_layers
            mode = (
                GPU_AUTO
                if layers is None
                else GPU_ALL
                if layers < 0
                else GPU_NONE
                if layers == 0
                else GPU_NUMBER
            )
            self.gpu_mode.setCurrentText(mode)
            if layers and layers > 0:
                self.gpu_layers.setValue(layers)
            self.gpu_layers.setEnabled(mode == GPU_NUMBER)
        finally:
            self._filling = False

    def settings(self) -> ModelSettings:
        """The settings as the controls show them."""
        mode = self.gpu_mode.currentText()
        layers = {GPU_AUTO: None, GPU_ALL: ALL_LAYERS, GPU_NONE: 0}.get(
            mode, self.gpu_layers.value()
        )
        kv: KvType = "q8_0" if self.kv_type.currentText() == "q8_0" else "f16"
        return ModelSettings(
            context_length=self.context.value() or None,
            parallel=self.parallel.value() or None,
            kv_type=kv,
            gpu_layers=layers,
        )

    def set_cannot_run(self, reason: str | None) -> None:
        """The selected file's reason never to run (None: it can run, once verified)."""
        if reason == self.cannot_run:
            return
        self.cannot_run = reason
        self._update_save()
        if reason is not None:
            self.show_plan(self.last_plan)
        elif self.model_id is not None:
            aio.spawn(self.refresh(), self)

    # -- the estimate --------------------------------------------------------------------
    def _changed(self) -> None:
        self.gpu_layers.setEnabled(
            self.cannot_run is None and self.gpu_mode.currentText() == GPU_NUMBER
        )
        if self._filling or self._shown is None:
            return
        self._drafts[self._shown] = self.settings()
        if self._shown != self.model_id:
            return  # the next model's settings replace these once read
        if self._drafts[self._shown] == self.stored:  # edited back to what is saved
            self._drafts.pop(self._shown)
            self.saved.clear()
        else:
            self.saved.setText("Not saved yet.")
        self._update_save()
        if self._estimating is not None and not self._estimating.done():
            self._estimating.cancel()  # only the latest settings' estimate is shown
        self._estimating = aio.spawn(self.refresh(), self)

    async def refresh(self) -> None:
        model_id = self.model_id
        if model_id is None:
            return
        decided = await self.core.memory_plan(model_id, self.settings())
        if model_id != self.model_id:
            return
        self.show_plan(decided)

    def _show_auto(self, decided: Plan | None) -> None:
        """What `auto` means here, in the context box: the longest context it gives this
        model (the trained one within the Max context or 8,192), or, with no model, the cap
        alone; never more than the fitter's rule gives (the memory may make it less, and
        Runs with says so)."""
        cap = self.core.settings.max_context
        if decided is None:
            top = cap if cap > 0 else DEFAULT_CONTEXT_CAP
        else:
            top = auto_context_top(decided.trained_context, cap)
        self.context.setSpecialValueText(f"auto (up to {top:,})")

    def _cap_note(self, decided: Plan) -> str:
        """Why the context is less than the model's setting (or than auto would give it),
        where Max context holds it: the cap, and where it comes from. A `--max-context` flag
        of this run wins over Settings' Max context (and is never saved): a user who saved
        16,384 here and sees 4,096 is told which to change."""
        cap = self.core.settings.max_context
        own = decided.own_context or 0
        wanted = own or decided.trained_context or 0
        if cap <= 0 or decided.context_length < cap or wanted <= cap:
            return ""
        flag = self.core.command_line.get("max_context")
        if flag is None:
            return f".\nAt most {cap:,} tokens: Max context in Settings caps every model."
        note = (
            f".\nAt most {cap:,} tokens: this run was started with `{flag}`, which caps every "
            "model (Max context in Settings does not apply while it is given)"
        )
        if own > cap:
            note += f"; the {own:,} saved here applies in a run without it"
        return note + "."

    def show_plan(self, decided: Plan | None) -> None:
        self.last_plan = decided
        self._show_auto(decided)
        if self.cannot_run is not None:
            self.runs_with.setText("—")
            self.estimate.setText(f"No estimate: this file never runs ({self.cannot_run}).")
            return
        if decided is None:
            self.runs_with.setText("—")
            self.estimate.setText("No estimate: this file's header cannot be read.")
            return
        trained = decided.trained_context
        layers = decided.settings.gpu_layers
        gpu = "all layers" if layers < 0 else f"{layers} layers" if layers else "no layers"
        self.runs_with.setText(
            f"{decided.context_length:,} tokens per request"
            + (f" (trained {trained:,})" if trained else "")
            + f", {decided.settings.parallel} at once, {decided.settings.kv_type} KV cache, "
            f"{gpu} on the GPU" + self._cap_note(decided)
        )
        colour, word = VERDICTS[decided.fit]
        cost = decided.estimate
        text = (
            f'<span style="color:{colour}">●</span> <b>{word}</b>: up to about '
            f"{gib(cost.total)} once its contexts fill (weights {gib(cost.weights)}, KV cache "
            f"{gib(cost.kv_cache)}, buffers {gib(cost.compute)}) of "
            f"{gib(decided.budget.available)} free; a first embedding opens up to "
            f"{gib(cost.embedding)} more, checked when it opens"
        )
        if cost.gpu:
            text += f"; {gib(cost.gpu)} on the GPU"
        if decided.reason:
            text += f"<br>{decided.reason}"
        self.estimate.setText(text)

    # -- saving --------------------------------------------------------------------------
    async def save(self) -> None:
        model_id = self.model_id
        if model_id is None:
            return
        self._saving = True
        self._update_save()
        try:
            chosen = self.settings()
            await self.core.save_model_settings(model_id, chosen)
            if model_id == self._shown:
                self.stored = chosen
            if self._drafts.get(model_id) == chosen:  # not changed again while saving
                self._drafts.pop(model_id)
            loaded = self.core.model_loaded_state(model_id) != "unloaded"
            self.saved.setText(
                f"Saved. {model_id} uses them from its next load"
                + (
                    " (it is loaded now with the settings it had: Unload, then Load, "
                    "applies them now)."
                    if loaded
                    else "."
                )
            )
        except LmspError as exc:
            self.saved.setText(exc.message)
        finally:
            self._saving = False
            self._update_save()
