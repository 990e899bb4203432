"""The models table: registry entries with digest, verification state, hashing progress."""

from __future__ import annotations

import time
from enum import IntEnum
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QFontDatabase

from lmsp_desktop.core.crashes import CrashRecord
from lmsp_desktop.core.models.info import ModelInfo
from lmsp_desktop.core.models.sources import SOURCE_LABELS, publisher_of
from lmsp_desktop.core.upstreams.catalog import UpstreamModelInfo
from lmsp_desktop.gui import aio
from lmsp_desktop.gui.core_api import CoreApi
from lmsp_desktop.gui.format import (
    date_time,
    dot_icon,
    human_count,
    human_size,
    short_digest,
)
from lmsp_desktop.gui.models.base import Index, RowTableModel
from lmsp_desktop.gui.models.upstream_rows import upstream_cells, upstream_tooltip

(
    COL_NAME,
    COL_SOURCE,
    COL_SIZE,
    COL_ARCH,
    COL_QUANT,
    COL_PARAMS,
    COL_CONTEXT,
    COL_DIGEST,
    COL_STATUS,
    COL_LOADED,
    COL_FOLDER,
) = range(11)
HEADERS = [
    "Name",
    "Source",
    "Size",
    "Architecture",
    "Quantization",
    "Parameters",
    "Context",
    "Digest",
    "Status",
    "Loaded",
    # Where the file is: its folder, or for a Hugging Face download the repo it came from
    # (`hf.co/owner/name`; the cache's folder is named by a commit hash), or an upstream's URL.
    "Location",
]
STATUS = {
    "verified": ("✓ verified", "#2fa84f"),
    "hashing": ("hashing", "#3d85e0"),
    "unverified": ("not verified yet", "#8c8c8c"),
    "changed": ("⚠ changed", "#e0a100"),
    "missing": ("✗ missing", "#e04848"),
    "invalid": ("✗ not a model", "#e04848"),
}
EXPLAIN = {
    "changed": "The file changed since it was verified, so it will not run. Choose Verify "
    "selected to check it again (and accept it if you replaced it on purpose).",
    "missing": "The file is no longer where it was found. Put it back or add the folder "
    "that now holds it, then Rescan.",
    "unverified": "The digest is being computed; the model runs once it is verified.",
    "invalid": "This file is never offered to run: it is not a GGUF model the engine can "
    "load, or its content differs from the digest its publisher announced (the Status tooltip "
    "says which). Replace it with a complete, intact .gguf file.",
}


class Role(IntEnum):
    MODEL_ID = Qt.ItemDataRole.UserRole + 1
    PROGRESS = Qt.ItemDataRole.UserRole + 2  # float 0..1 while hashing, else None
    STATE = Qt.ItemDataRole.UserRole + 3
    PATH = Qt.ItemDataRole.UserRole + 4
    DIGEST = Qt.ItemDataRole.UserRole + 5
    # The end of the folder's text that tells it from every other folder listed ("/b/models"
    # when "~/a/models" is listed too): eliding keeps it whole.
    FOLDER_TAIL = Qt.ItemDataRole.UserRole + 6


class ModelTableModel(RowTableModel):
    """Rows of the registry's ModelInfo, with the runner's loaded state beside them."""

    headers = HEADERS

    def __init__(self, core: CoreApi, parent: Any = None) -> None:
        super().__init__(parent)
        self.core = core
        self._rows: list[ModelInfo] = []
        self._progress: dict[str, float] = {}
        self._progress_at: dict[str, float] = {}
        self._loaded: dict[str, str] = {}
        # The engine's message of the last failed load per model, until it loads.
        self._load_errors: dict[str, str] = {}
        # The time of the crash shown per model when the user unloaded it by hand: not shown
        # from then on (crash_shown).
        self._crashes_seen: dict[str, float] = {}
        self._tails: dict[str, str] = {}  # folder text → its distinguishing end
        # The context each local model runs with (or would, loaded now), from the Models
        # page's plans: `models list`'s CONTEXT beside its TRAINED.
        self.contexts: dict[str, int] = {}
        # The context each loaded model was loaded with (the runner's, as /api/ps says it):
        # while it is loaded the cell says that, and a saved setting that differs only as
        # what the next load takes.
        self.loaded_contexts: dict[str, int] = {}
        # What the last scan could not list (an unreadable folder, a manifest naming a
        # missing blob, a broken link), one sentence each with what to do.
        self.problems: list[str] = []
        # Reloads begun, and which of them the rows shown were read by: a row read by a
        # reload begun after some moment says what the registry had after it.
        self.reads_begun = 0
        self.rows_read = 0

    def state_of(self, info: ModelInfo) -> str:
        return "hashing" if info.id in self._progress else str(info.state)

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or index.row() >= len(self._rows):
            return None
        info, col = self._rows[index.row()], index.column()
        state = self.state_of(info)
        if isinstance(info, UpstreamModelInfo) and role in (
            Qt.ItemDataRole.DisplayRole,
            Qt.ItemDataRole.ToolTipRole,
        ):  # a model served by another machine: its upstream's state, not a file's
            if role == Qt.ItemDataRole.DisplayRole:
                return upstream_cells(info)[HEADERS[col]]
            return upstream_tooltip(info, HEADERS[col])
        if role == Qt.ItemDataRole.DisplayRole:
            return self._display(info, col, state)
        if role == Qt.ItemDataRole.ToolTipRole:
            if col == COL_NAME:
                return name_tooltip(info)
            if col == COL_FOLDER:
                return location_tooltip(info)
            crash = self.crash_shown(info.id) if col == COL_LOADED else None
            if crash is not None and self._loaded.get(info.id, "unloaded") == "unloaded":
                return crash_text(crash)
            if crash is not None and self._loaded.get(info.id) == "loaded":
                return crash_text(crash, loaded=True)
            if col == COL_LOADED and info.id in self._load_errors:
                return self._load_errors[info.id]
            if col == COL_LOADED and self._loaded.get(info.id) == "loaded":
                left = self.core.model_idle_seconds_left(info.id)
                until = "" if left is None else f"It unloads in {minutes(left)} unless used. "
                return f"{until}Loaded models are unloaded after the idle time set in Settings."
            if state == "changed" and col in FACTS:
                return changed_tooltip(info)
            if col == COL_CONTEXT:
                return context_tooltip(
                    self.contexts.get(info.id),
                    info.context_length,
                    self.loaded_contexts.get(info.id),
                )
            if col == COL_DIGEST:
                return digest_tooltip(info)
            if col == COL_SOURCE:
                return source_tooltip(info)
            if col == COL_STATUS:
                if state == "verified" and info.verified_at:
                    return f"Digest verified {date_time(info.verified_at)}"
                if state == "invalid":
                    return f"Not run: {info.invalid_reason}"
                if state == "missing" and not isinstance(info, UpstreamModelInfo):
                    parts = info.missing_reason  # a split model's part gone, not its file
                    if parts is not None:
                        return f"Not run: {parts}. Put every part back beside it, then Rescan."
                return EXPLAIN.get(state)
        if role == Qt.ItemDataRole.DecorationRole and col == COL_LOADED:
            if isinstance(info, UpstreamModelInfo):
                return None  # no memory here: the cell says where it runs, in words
            loaded = self._loaded.get(info.id, "unloaded")
            return dot_icon("#3d85e0", hollow=loaded == "loading") if loaded != "unloaded" else None
        if role == Qt.ItemDataRole.TextAlignmentRole and col in (COL_SIZE, COL_PARAMS, COL_CONTEXT):
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if role == Qt.ItemDataRole.FontRole and col == COL_DIGEST and info.digest_matches is None:
            # A digest reads best in a fixed font; the publisher's verdict is a sentence.
            return QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        if role == Role.MODEL_ID:
            return info.id
        if role == Role.PROGRESS:
            return self._progress.get(info.id)
        if role == Role.STATE:
            return state
        if role == Role.PATH:
            return str(info.path)
        if role == Role.DIGEST:
            return info.digest
        if role == Role.FOLDER_TAIL and not isinstance(info, UpstreamModelInfo):
            return self._tails.get(folder_text(Path(info.path)), "")
        return None

    def _display(self, info: ModelInfo, col: int, state: str) -> str:
        if col == COL_NAME:
            return name_text(info)
        if col == COL_SOURCE:
            return SOURCE_LABELS.get(info.source, info.source)
        if col == COL_FOLDER:
            return folder_text(Path(info.path))
        if col == COL_SIZE:
            now = observed_size(info)
            if now is not None and state == "changed":
                # What is at its path now (a file copied over it): the verified file's size
                # read as the file's. The tooltip says both.
                return f"⚠ {human_size(now)}"
            return human_size(info.size_bytes)
        if col == COL_ARCH:
            return info.architecture or "—"
        if col == COL_QUANT:
            return info.quantization or "—"
        if col == COL_PARAMS:
            return human_count(info.parameters)
        if col == COL_CONTEXT:
            return context_text(
                self.contexts.get(info.id), info.context_length, self.loaded_contexts.get(info.id)
            )
        if col == COL_DIGEST:
            return digest_text(info)
        if col == COL_STATUS:
            if state == "hashing":
                return f"hashing {self._progress.get(info.id, 0.0):.0%}"
            if state == "invalid" and info.digest_matches is False:
                return "✗ digest differs"
            word = STATUS.get(state, (state, ""))[0]
            if state == "verified" and info.verified_at:
                word += f" {date_time(info.verified_at)[:10]}"  # the time is in the tooltip
            return word
        loaded = self._loaded.get(info.id, "unloaded")
        crash = self.crash_shown(info.id)
        if crash is not None and loaded == "loaded":
            # Loaded again for its tasks (resume, retry): the crash still shows (it was gone
            # from the window the moment they loaded it again), until the user loads or
            # unloads it by hand. The tooltip says it in full.
            at = time.strftime("%H:%M", time.localtime(crash.at))
            return f"loaded · ⚠ crashed {at} ({crash.cause}), {crash.tasks_text()}"
        if crash is not None and loaded == "unloaded":
            # Short: at 900 px the Name, Status and Loaded columns are never cut, so a longer
            # cell pushed the table into scrolling sideways. The tooltip says "engine" and
            # gives the date and seconds.
            held = " · Load again" if crash.held else ""
            at = time.strftime("%H:%M", time.localtime(crash.at))
            return f"✗ crashed ({crash.cause}, {at}){held}"
        if loaded == "unloaded" and info.id in self._load_errors:
            return "✗ failed to load"
        if loaded != "loaded":
            return "" if loaded == "unloaded" else loaded
        left = self.core.model_idle_seconds_left(info.id)
        # Short: a longer cell ("loaded · unloads in 10 min") pushed Source out of a 1200 px
        # window. The tooltip says what the minutes are.
        return "loaded" if left is None else f"loaded · {minutes(left)}"

    def crash_shown(self, model_id: str) -> CrashRecord | None:
        """The model's last engine crash, unless the user unloaded it by hand since (a load by
        hand forgets it in the core: CrashLog.release)."""
        crash = self.core.model_crash(model_id)
        if crash is None or self._crashes_seen.get(model_id) == crash.at:
            return None
        return crash

    def unloaded_by_hand(self, model_id: str) -> None:
        """The user unloads the model (Unload): its last crash is no longer shown."""
        crash = self.core.model_crash(model_id)
        if crash is not None:
            self._crashes_seen[model_id] = crash.at
            self._changed(model_id, COL_LOADED)

    def in_memory(self) -> list[tuple[str, int | None, str]]:
        """Models loaded or loading, as the sidebar lists them: (name, bytes, state); the bytes
        are its engine process's resident memory where known (the KV cache and buffers are
        often many times the file), else the file's size."""
        shown: list[tuple[str, int | None, str]] = []
        for info in self._rows:
            if isinstance(info, UpstreamModelInfo):
                continue  # runs on another machine: nothing of it is in this one's memory
            loaded = self._loaded.get(info.id, "unloaded")
            if loaded == "unloaded":
                continue
            size = self.core.model_memory(info.id) or info.size_bytes
            if loaded == "loading":
                shown.append((str(info.id), size, "loading…"))
            elif loaded == "loaded":
                left = self.core.model_idle_seconds_left(info.id)
                text = "loaded" if left is None else f"unloads in {minutes(left)}"
                shown.append((str(info.id), size, text))
        return shown

    # -- updates -----------------------------------------------------------------------------
    def model_id(self, row: int) -> str:
        return str(self._rows[row].id)

    def info(self, row: int) -> ModelInfo:
        return self._rows[row]

    def row_of(self, model_id: str) -> int | None:
        return next((r for r, info in enumerate(self._rows) if info.id == model_id), None)

    def schedule_reload(self) -> None:
        """Re-read the list soon; progress heard from now on survives that re-read."""
        aio.spawn(self.reload(time.monotonic()))

    async def reload(self, started: float | None = None) -> None:
        started = time.monotonic() if started is None else started
        self.reads_begun += 1
        read = self.reads_begun
        rows = await self.core.models()
        self.rows_read = read
        self.problems = self.core.model_problems()
        for info in rows:
            # Settled since the last progress event, unless that event came while we read.
            if info.state != "hashing" and self._progress_at.get(info.id, 0) < started:
                self._progress.pop(info.id, None)
            else:
                self._progress.setdefault(info.id, 0.0)
        self._loaded = {i.id: self.core.model_loaded_state(i.id) for i in rows}
        self._tails = distinguishing_tails({folder_text(Path(i.path)) for i in rows})
        if [i.id for i in rows] == [i.id for i in self._rows]:
            self._rows = rows
            if rows:
                self.dataChanged.emit(self.index(0, 0), self.index(len(rows) - 1, COL_LOADED))
            return
        self.beginResetModel()  # models come and go rarely; a reset keeps this simple
        self._rows = rows
        self.endResetModel()

    def set_contexts(self, contexts: dict[str, int], loaded: dict[str, int] | None = None) -> None:
        """What each model would run with at its next load (`contexts`), and what the loaded
        ones run with now (`loaded`)."""
        loaded = {} if loaded is None else loaded
        if (contexts, loaded) != (self.contexts, self.loaded_contexts) and self._rows:
            self.contexts = contexts
            self.loaded_contexts = loaded
            last = len(self._rows) - 1
            self.dataChanged.emit(self.index(0, COL_CONTEXT), self.index(last, COL_CONTEXT))

    def set_progress(self, progress: dict[str, float]) -> None:
        for model_id, fraction in progress.items():
            self._progress[model_id] = fraction
            self._progress_at[model_id] = time.monotonic()
            self._changed(model_id, COL_STATUS)

    def set_loaded(self, states: dict[str, str]) -> None:
        """The runner loaded or unloaded models (model id → unloaded, loading or loaded)."""
        for model_id, state in states.items():
            if state == "loaded" and self._load_errors.pop(model_id, None) is not None:
                self._changed(model_id, COL_LOADED)
            if self._loaded.get(model_id) != state:
                self._loaded[model_id] = state
                self._changed(model_id, COL_LOADED)

    def set_load_failed(self, model_id: str, message: str) -> None:
        """A task could not load `model_id`: its row says so until the model loads."""
        self._load_errors[model_id] = message
        self._changed(model_id, COL_LOADED)

    def tick(self) -> None:
        """The idle countdown of loaded models moves with the clock."""
        for row, info in enumerate(self._rows):
            if self._loaded.get(info.id) == "loaded":
                index = self.index(row, COL_LOADED)
                self.dataChanged.emit(index, index, [Qt.ItemDataRole.DisplayRole])

    def _changed(self, model_id: str, col: int) -> None:
        for row, info in enumerate(self._rows):
            if info.id == model_id:
                self.dataChanged.emit(self.index(row, col), self.index(row, col))


def context_text(runs: int | None, trained: int | None, loaded: int | None = None) -> str:
    """The Context cell: what the model runs with, and what it was trained for where that is
    more (`4,096 of 8,192`, as `models list` says CONTEXT 4096, TRAINED 8192). A loaded
    model runs with what it was loaded with (`loaded`), as LM Studio and `ollama ps` say; a
    saved setting that differs is what the next load takes: `8,192 (4,096 at next load)`."""
    if loaded and runs and loaded != runs:
        return f"{loaded:,} ({runs:,} at next load)"
    runs = loaded or runs
    if runs and trained and runs < trained:
        return f"{runs:,} of {trained:,}"
    shown = runs or trained
    return f"{shown:,}" if shown else "—"


def context_tooltip(runs: int | None, trained: int | None, loaded: int | None = None) -> str | None:
    """As the Load settings panel says it; for a loaded model, what it was loaded with."""
    if loaded:
        of = f" (trained {trained:,})" if trained else ""
        if runs and runs != loaded:
            return (
                f"Loaded with {loaded:,} tokens per request{of}. Its saved Load settings "
                f"give {runs:,} at its next load: Unload, then Load to use them now."
            )
        return f"Loaded with {loaded:,} tokens per request{of}."
    if not runs:
        return f"Trained for {trained:,} tokens." if trained else None
    return f"Runs with {runs:,} tokens per request" + (
        f" (trained {trained:,}): its Load settings, or the memory, hold it to that."
        if trained and runs < trained
        else f" (trained {trained:,})."
        if trained
        else "."
    )


def name_text(info: ModelInfo) -> str:
    """The Name cell: `smollm2:135m (also :latest)` (ModelInfo.name_text, as `lmsp-desktop
    models list` shows it too)."""
    return info.name_text


def name_tooltip(info: ModelInfo) -> str:
    """The Name cell's tooltip: each name whole, then the file."""
    if not info.aliases:
        return str(info.path)
    others = ", ".join(info.aliases)
    return (
        f"{info.id}, also {others}: the same file by each of the names its store gives it, "
        f"and requests may use any of them.\n{info.path}"
    )


# The publisher as the Digest cell names it: "✓ matches Hugging Face's digest" took the room
# of the Quantization and Architecture columns at the default size (1398 px); the tooltip says
# it in full words.
SHORT_PUBLISHERS = {"Hugging Face": "HF"}


def digest_text(info: ModelInfo) -> str:
    """The Digest cell: the publisher's verdict where the store published a digest ("✓ matches
    HF", "✗ differs from Ollama"), else our own digest, shortened."""
    publisher = publisher_of(info.source)
    short = SHORT_PUBLISHERS.get(publisher, publisher.removeprefix("its "))
    if info.state == "missing":  # no file to match anything: it kept "✓ matches"
        return "✗ file missing"
    if info.digest_matches is True:
        return f"✓ matches {short}"
    if info.digest_matches is False:
        return f"✗ differs from {short}"
    return short_digest(info.digest)


def digest_tooltip(info: ModelInfo) -> str:
    ours = info.digest or "not computed yet"
    if info.published_digest is None:
        return ours
    publisher = publisher_of(info.source)
    verdict = (
        f"This file matches the digest {publisher} published.\n"
        if info.digest_matches is True and info.state != "missing"
        else f"This file differs from the digest {publisher} published.\n"
        if info.digest_matches is False
        else ""
    )
    return f"{verdict}This file: {ours}\nPublished by {publisher}: {info.published_digest}"


def source_tooltip(info: ModelInfo) -> str:
    label = SOURCE_LABELS.get(info.source, info.source)
    if info.source in ("folder", "demo"):
        return f"{label}: {info.path}"
    return f"Found in {label}'s store, read in place (never copied): {info.path}"


def crash_text(crash: CrashRecord, *, loaded: bool = False) -> str:
    """The Loaded cell's tooltip after an engine crash: what died, when, what became of its
    tasks, and what the user can do; `loaded`: loaded again since (for its tasks)."""
    then = (
        "It was loaded again for its tasks. Unloading or loading it by hand clears this."
        if loaded
        else "It is not loaded again by itself: Load again."
        if crash.held
        else ("The next request loads it again; so does Load again.")
    )
    return (
        f"The engine process of this model ended with {crash.cause} at {date_time(crash.at)}"
        f" (tasks: {crash.tasks_text()}). {then}"
    )


# The cells that tell of the verified file's header: a changed model's are not its new file's.
FACTS = (COL_SIZE, COL_ARCH, COL_QUANT, COL_PARAMS, COL_CONTEXT)


def observed_size(info: ModelInfo) -> int | None:
    """The bytes at a changed model's path now (meta `observed_size_bytes`, from the scan or
    run that found it changed, or a verify), or None."""
    value = info.meta.get("observed_size_bytes")
    return value if isinstance(value, int) else None


def changed_tooltip(info: ModelInfo) -> str:
    """The facts cells' tooltip for a changed model: they are the verified file's."""
    now = observed_size(info)
    there = (
        f"The file at its path now is {human_size(now)} ({now:,} bytes) and is not verified. "
        if now is not None
        else "The file at its path now is not verified. "
    )
    return (
        f"{there}Size, architecture, quantization, parameters, context and the memory "
        f"estimate are of the file verified (its size: {human_size(info.size_bytes)}), until "
        "you verify it again or accept the new file."
    )


def minutes(seconds: float) -> str:
    """A countdown in whole minutes, rounded up ("10 min"), or seconds under a minute."""
    if seconds < 60:
        return f"{int(seconds)} s"
    return f"{-(-int(seconds) // 60)} min"


def hub_repo(path: Path) -> str | None:
    """The Hugging Face repo (`owner/name`, with the folders inside the snapshot) of a file in
    the Hugging Face cache, else None."""
    parts = path.parts
    if "snapshots" in parts[:-2]:
        at = len(parts) - 1 - parts[::-1].index("snapshots")
        if at >= 1 and parts[at - 1].startswith("models--"):
            repo = parts[at - 1].removeprefix("models--").replace("--", "/")
            return "/".join([repo, *parts[at + 2 : -1]])
    return None


def folder_text(path: Path) -> str:
    """The Location cell: the folder holding a model, with the home folder as ~ (the full
    path is on hover). A file in the Hugging Face cache shows the repo it came from as the
    hub addresses it (`hf.co/owner/name`), not the folder named by the snapshot's commit
    hash that holds it: a bare `owner/name` under "Folder" read as a folder that is not."""
    repo = hub_repo(path)
    if repo is not None:
        return f"hf.co/{repo}"
    folder = path.parent
    try:
        return str(Path("~") / folder.relative_to(Path.home()))
    except ValueError:
        return str(folder)


def location_tooltip(info: ModelInfo) -> str:
    """The Location cell's tooltip: the file's whole path, and for a download from the hub
    that it is a copy of that repo's file kept in the Hugging Face cache."""
    repo = hub_repo(Path(info.path))
    if repo is None:
        return str(info.path)
    return (
        f"Downloaded from the Hugging Face repo {repo}; the file is in the Hugging Face "
        f"cache on this machine:\n{info.path}"
    )


def distinguishing_tails(folders: set[str]) -> dict[str, str]:
    """For each folder, its shortest end of whole path parts ("/models", "/b/models") that no
    other folder ends with: what must stay visible when the column elides the rest."""
    split = {f: f.rstrip("/").split("/") for f in folders}
    tails = {}
    for folder, parts in split.items():
        others = [p for f, p in split.items() if f != folder]
        for k in range(1, len(parts) + 1):
            if all(other[-k:] != parts[-k:] for other in others):
                break
        tails[folder] = "/".join(parts[-k:]) if k < len(parts) else folder
    return tails
