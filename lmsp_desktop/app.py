"""The composition root: wires store, recovery, models, runner and service into one Core
that both `serve` (plain asyncio) and the desktop window (qasync) run."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import sqlite3
import time
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lmsp_desktop.core.api.creation import create_task
from lmsp_desktop.core.api.responses import INTAKE as RESPONSES
from lmsp_desktop.core.client_calls import ClientCalls
from lmsp_desktop.core.config import Settings, default_cache_dir
from lmsp_desktop.core.context_window import TokenCounter, effective_context
from lmsp_desktop.core.crashes import CrashRecord
from lmsp_desktop.core.downloads.estimate import remote_shape
from lmsp_desktop.core.downloads.hub import GgufChoice, downloaded
from lmsp_desktop.core.downloads.manager import DownloadManager
from lmsp_desktop.core.downloads.pull import pull, repo_models, search_hub
from lmsp_desktop.core.downloads.token import hub_token, save_token, stored_token
from lmsp_desktop.core.engines.base import Engine, EngineError, LoadSettings
from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.follow import EventFollower
from lmsp_desktop.core.lock import DataDirLock
from lmsp_desktop.core.models.digest_cache import DigestCache
from lmsp_desktop.core.models.fitting import ModelFitter, is_local
from lmsp_desktop.core.models.info import ModelInfo
from lmsp_desktop.core.models.machine import resident_memory
from lmsp_desktop.core.models.memory import CapOrigin, ModelSettings, Plan, one_context
from lmsp_desktop.core.models.memory import plan as plan_load
from lmsp_desktop.core.models.registry import ModelRegistry
from lmsp_desktop.core.pairing import PairingManager
from lmsp_desktop.core.runner import Runner
from lmsp_desktop.core.service.context import ServiceContext
from lmsp_desktop.core.service.host import Listener, ServiceHost, listen
from lmsp_desktop.core.shutdown import StopSteps
from lmsp_desktop.core.states import UNFINISHED
from lmsp_desktop.core.storage import model_settings as model_settings_store
from lmsp_desktop.core.storage import upstreams as upstream_store
from lmsp_desktop.core.storage.idempotency import purge_expired, release_in_flight_in
from lmsp_desktop.core.storage.recovery import (
    last_report,
    recover,
)
from lmsp_desktop.core.storage.retention import purge_finished
from lmsp_desktop.core.storage.store import Store
from lmsp_desktop.core.storage.tasks import Row
from lmsp_desktop.core.upstreams.catalog import UpstreamCatalog
from lmsp_desktop.core.views import (
    PromptProgress,
    RecoveryItem,
    RecoveryReport,
    TaskFilter,
    TaskRow,
)

if TYPE_CHECKING:
    from lmsp_desktop.core.views import CoreListener

log = logging.getLogger(__name__)
# service_config keys: a clean stop leaves a note for the next start's recovery report.
QUIT_NOTE = "clean_quit"
RECOVERY_AFTER_QUIT = "recovery_after_quit"
RETENTION_EVERY_S = 3600.0
LOGGED_ITEMS = 50  # recovery report lines written to the log (10k lines would slow startup)


def listing(models: list[ModelInfo]) -> list[tuple[object, ...]]:
    """What a rescan can change of the model list: which files, their states and contents."""
    return [(m.id, m.state, m.path, m.size_bytes, m.mtime_ns, m.digest) for m in models]


class Core(ClientCalls):
    """Everything the service is, in the order chapter 11 wants it started: lock → store →
    port bound → recovery → model scan → serve. The port is bound before anything in the
    store changes (a start that cannot listen changes nothing) and served on only once
    recovery has finished."""

    def __init__(
        self,
        data_dir: Path,
        *,
        model_dirs: list[Path] | None = None,
        host: str | None = None,
        port: int | None = None,
        engine: Engine | None = None,
        include_demo: bool = True,
        no_sources: list[str] | None = None,
        allowed_origins: list[str] | None = None,
        max_context: int | None = None,
        port_in_use: int | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.store = Store(self.data_dir)
        self._lock = DataDirLock(self.data_dir)
        self._flag_dirs = [Path(d) for d in model_dirs or []]
        self._flag_host, self._flag_port = host, port
        # The port this run was to use, found in use at start: `port` was chosen instead in
        # the window's box (launch.py), not typed as --port; Settings says which.
        self._port_in_use = port_in_use
        self._flag_no_sources = list(no_sources or [])
        self._flag_origins = list(allowed_origins or [])
        self._flag_max_context = max_context
        # Where this run's Max context comes from: the flag's wins for the run (the 400's
        # advice on raising it names the flag, not Settings).
        self.cap_origin = CapOrigin.SETTINGS if max_context is None else CapOrigin.FLAG
        self._engine = engine
        self._include_demo = include_demo
        # What the user set (stored) and what this run uses: the stored settings with the
        # command line's one-off flags on top. Only the first is ever written back.
        self.stored_settings = Settings()
        self.settings = Settings()
        self.recovery_report: RecoveryReport | None = None
        self.registry: ModelRegistry
        self.upstreams: UpstreamCatalog
        self.runner: Runner
        self.downloads: DownloadManager
        self.pairing: PairingManager
        self.follower: EventFollower
        self.context: ServiceContext
        self.listener: Listener | None = None  # bound by open(), served on by start_service()
        self.host: ServiceHost | None = None
        self.url = ""
        self._background: list[asyncio.Task[Any]] = []
        self._load_adapters: dict[int, Callable[[str, str, float], None]] = {}
        self._upstream_adapters: dict[int, Callable[[], None]] = {}
        # The signal that ends this run ("SIGTERM", "SIGINT"), set by whoever handles it
        # (`serve`, the window's launcher); None when the user quits. The next start says so.
        self.stopped_by_signal: str | None = None

    # -- startup, in order -------------------------------------------------------------
    async def open(self) -> RecoveryReport:
        """Lock the data directory, open the store, bind the service's port, then recover
        leftovers. The port is bound before anything in the store changes: a start that
        cannot listen (the port in use) fails with the store as it was, no recovery run, no
        report or event written, no model hashed. Nothing is served before this has
        finished (start_service serves on the sockets bound here)."""
        self._lock.acquire()
        try:
            if self.store.db.path.exists():
                before_writes: Callable[[Settings], Coroutine[Any, Any, None]] | None = self._listen
            else:
                # A new store has no settings to read: listen with the defaults before its
                # file is made, so a start that cannot listen leaves no empty lmsp.db behind.
                await self._listen(Settings())
                before_writes = None
            # The integrity check runs beside recovery; nothing commits before it passed.
            await self.store.open(check_beside=True, before_writes=before_writes)
        except BaseException:
            self._close_listener()
            self._lock.release()
            raise
        try:
            self.recovery_report, released, quit_note = await self._recover()
        except BaseException:  # a damaged file found by the check: nothing was changed
            await self.store.close()
            self._close_listener()
            self._lock.release()
            raise
        if released:
            log.info("released %d idempotency keys left in flight", released)
        if self.recovery_report.items and isinstance(quit_note, dict):
            unfinished = int(quit_note.get("unfinished", 0))
            signal_name = quit_note.get("signal")
            self.recovery_report.quit_with_unfinished = unfinished
            self.recovery_report.stopped_by_signal = signal_name
            after_quit = {
                "started_at": int(self.recovery_report.started_at),
                "n": unfinished,
                "signal": signal_name,
            }
            await self.store.set_config(RECOVERY_AFTER_QUIT, after_quit)
        self._log_report(self.recovery_report)
        self.registry = ModelRegistry(
            self.store.db,
            [Path(d).expanduser() for d in self.settings.model_dirs],
            include_demo=self._include_demo,
            sources=self.settings.enabled_sources(),
            digests=DigestCache(default_cache_dir() / "model-digests.json"),
        )
        self.upstreams = UpstreamCatalog(self.store.db)
        await self.upstreams.refresh()  # before the runner picks up recovered upstream tasks
        self.registry.upstreams = self.upstreams
        self.pairing = PairingManager(self.store.db)
        self.follower = EventFollower(self.store.tasks)
        if self._engine is None:
            # Each loaded model runs llama.cpp in its own worker process (docs/engine.md).
            from lmsp_desktop.core.engines.worker import WorkerEngine

            self._engine = WorkerEngine(
                n_threads=self.settings.threads(),
                parallel=self.settings.parallel_per_model,
                contexts_on_demand=True,
                verdict_file=default_cache_dir() / "exactness-verdicts.json",
            )
        self.runner = Runner(
            self.store.tasks,
            self.registry,
            self._engine,
            max_loaded_models=self.settings.max_loaded_models,
            idle_unload_s=self.settings.idle_unload_s,
            parallel_per_model=self.settings.parallel_per_model,
            remote=self.upstreams,
            settings_of=self._settings_of,
        )
        self.downloads = DownloadManager(
            self.store.tasks, token=hub_token, on_complete=self._downloaded
        )
        self.tokens = TokenCounter()
        shapes_of = getattr(self._engine, "context_shapes", None) or one_context
        self.fitter = ModelFitter(
            self.store.db,
            shapes_of,
            default_parallel=lambda: self.settings.parallel_per_model,
            context_cap=lambda: self.settings.max_context,
            cap_origin=self.cap_origin,
            file_gone=self.registry.file_gone,
        )
        self.runner.load_listeners.append(self._forget_unloaded)
        self.context = ServiceContext(
            store=self.store,
            settings=self.settings,
            registry=self.registry,
            follower=self.follower,
            runner=self.runner,
            pairing=self.pairing,
            recovery_report=self.recovery_report,
            upstreams=self.upstreams,
            started_at=time.time(),
            tokens=self.tokens,
            fitter=self.fitter,
            downloads=self.downloads,
        )
        return self.recovery_report

    async def _listen(self, stored: Settings) -> None:
        """Inside the store's opening, before anything in it changes: this run's settings
        (the stored ones with the command line's flags on top), and the port bound with
        them (core/service/host.py's listen, the one way the service binds)."""
        self.stored_settings = stored.validate()
        self.settings = self._with_flags(self.stored_settings)
        self.listener = await listen(self.settings.host, self.settings.port)

    def _close_listener(self) -> None:
        if self.listener is not None:
            self.listener.close()

    async def _recover(self) -> tuple[RecoveryReport, int, Any]:
        """A start's writes, in one transaction (the first to commit, once the integrity
        check has passed): a new database's identity, the clean-stop note cleared (so a
        crash during this run is not read as one), the idempotency keys a dead process left
        in flight released, this start counted, and table 11.3 applied. Returns the report,
        the keys released and the note."""
        quit_note = await self.store.get_config(QUIT_NOTE)  # a note from a clean stop
        released: list[int] = []

        def first(conn: sqlite3.Connection) -> None:
            self.store.save_identity(conn)  # a new database's service id
            if quit_note is not None:
                conn.execute(
                    "INSERT OR REPLACE INTO service_config (key, value) VALUES (?, 'null')",
                    (QUIT_NOTE,),
                )
            released.append(release_in_flight_in(conn))

        report = await recover(self.store.tasks, first=first)
        return report, released[0], quit_note

    async def _settings_of(self, model_id: str) -> LoadSettings:
        """How a model is loaded: its settings fitted to the memory available (the runner
        has already unloaded what it makes room from); EngineError insufficient_memory when
        it cannot fit. A file whose header cannot be read loads with the plain defaults and
        the engine reports what is wrong with it."""
        info = await self.registry.get(model_id)
        try:
            return await self.fitter.settings_for_load(info)
        except (OSError, ValueError) as exc:
            log.debug("no memory plan for %s (%s): loading with the defaults", model_id, exc)
            return LoadSettings(
                context_length=effective_context(info.context_length, self.settings.max_context),
                parallel=self.settings.parallel_per_model,
            )

    def _forget_unloaded(self, model_id: str, state: str, _progress: float) -> None:
        if state == "unloaded":
            self.fitter.unloaded(model_id)

    async def scan_models(self) -> None:
        await self.registry.scan()

    async def start_service(self) -> str:
        """Scan the models, start the runner and serve on the sockets open() bound; announce
        the URL like `serve` does.
        The scan runs in the background (unless one ran already): this returns without
        waiting for it, and the runner waits for a model the scan has not recorded or
        hashed yet instead of failing its tasks (core/models/scan_gate.py)."""
        self.registry.start_scan()
        self.upstreams.start()
        await self.runner.start()
        await self.downloads.start()
        assert self.listener is not None, "open() binds the port before start_service()"
        self.host = ServiceHost(self.context, self.listener)
        self.url = await self.host.start()
        self.pairing.verification_uri = self.url
        self._write_service_json()
        print(f"LMSP service listening on {self.url}", flush=True)
        self._background.append(asyncio.create_task(self._housekeeping()))
        return self.url

    async def start(self) -> str:
        await self.open()
        return await self.start_service()

    # -- running -----------------------------------------------------------------------
    async def submit(
        self,
        model: str,
        prompt: str,
        on_restart: str | None = None,
        *,
        max_output_tokens: int | None = None,
    ) -> str:
        """Create a background task as the owner, through the API's creation path (refused
        while paused or shutting down, like `POST /v1/responses`)."""
        body: dict[str, Any] = {"model": model, "input": prompt, "background": True}
        if on_restart:
            body["on_restart"] = on_restart
        if max_output_tokens is not None:
            body["max_output_tokens"] = max_output_tokens
        created = await create_task(self.context, body, client_id=None, intake=RESPONSES)
        return created.task_id

    def _with_flags(self, stored: Settings) -> Settings:
        """The settings this run uses: `stored` with the command line's flags on top."""
        flag_dirs = [str(d) for d in self._flag_dirs if str(d) not in stored.model_dirs]
        off = [s for s in self._flag_no_sources if s not in stored.disabled_sources]
        origins = [o for o in self._flag_origins if o not in stored.allowed_origins]
        return dataclasses.replace(
            stored,
            host=stored.host if self._flag_host is None else self._flag_host,
            port=stored.port if self._flag_port is None else self._flag_port,
            max_context=(
                stored.max_context if self._flag_max_context is None else self._flag_max_context
            ),
            model_dirs=[*stored.model_dirs, *flag_dirs],
            disabled_sources=[*stored.disabled_sources, *off],
            allowed_origins=[*stored.allowed_origins, *origins],
        ).validate()

    @property
    def command_line(self) -> dict[str, str]:
        """Settings this run takes from command-line flags (name → the flag as given); they
        apply to this run only and are never saved."""
        flags: dict[str, str] = {}
        if self._flag_host is not None:
            flags["host"] = f"--host {self._flag_host}"
        if self._flag_port is not None and self._port_in_use is None:
            flags["port"] = f"--port {self._flag_port}"
        if self._flag_max_context is not None:
            flags["max_context"] = f"--max-context {self._flag_max_context}"
        if self._flag_dirs:
            flags["model_dirs"] = " ".join(f"--models-dir {d}" for d in self._flag_dirs)
        if self._flag_no_sources:
            flags["disabled_sources"] = " ".join(f"--no-source {s}" for s in self._flag_no_sources)
        if self._flag_origins:
            flags["allowed_origins"] = " ".join(f"--allow-origin {o}" for o in self._flag_origins)
        return flags

    @property
    def chosen_port(self) -> tuple[int, int] | None:
        """(the port this run uses, the port in use it replaced) when that port was chosen at
        start in the window's box, for this run only; None otherwise, or once it is saved as
        Settings' port."""
        if self._port_in_use is None or self._flag_port is None:
            return None
        if self.stored_settings.port == self._flag_port:
            return None
        return self._flag_port, self._port_in_use

    def apply_settings(self, settings: Settings) -> bool:
        """Settings saved in the dialog take effect now, without losing tasks: retention, the
        default policy, loaded-model limits, origins and model folders. The bind address and
        port apply at the next start. Returns True when the model folders or sources changed
        (rescan)."""
        live = self.settings
        live.retention_days = settings.retention_days
        live.default_on_restart = settings.default_on_restart
        live.max_loaded_models = settings.max_loaded_models
        live.max_context = settings.max_context  # models loaded from now on
        live.idle_unload_s = settings.idle_unload_s
        live.allowed_origins = self._with_flags(settings).allowed_origins
        self.runner.max_loaded_models = settings.max_loaded_models
        self.runner.idle_unload_s = settings.idle_unload_s
        live.parallel_per_model = self.runner.parallel_per_model = settings.parallel_per_model
        from lmsp_desktop.core.engines.llama import LlamaEngine
        from lmsp_desktop.core.engines.worker import WorkerEngine

        if isinstance(self._engine, LlamaEngine | WorkerEngine):
            # A loaded model keeps its sequence count; the next load takes the new one (extra
            # lanes wait inside the engine for a free sequence meanwhile).
            self._engine.parallel = settings.parallel_per_model
        folders = [Path(d).expanduser().resolve() for d in settings.model_dirs]
        changed = folders != self.registry.folders
        if changed:
            self.registry.folders = folders
            live.model_dirs = list(settings.model_dirs)
        sources = set(settings.enabled_sources())
        if sources != self.registry.sources:
            self.registry.sources = sources
            live.disabled_sources = list(settings.disabled_sources)
            changed = True
        return changed

    def pause(self, paused: bool) -> None:
        """Drain (USERS_ASK #7): refuse new responses with 503, let accepted tasks finish."""
        self.context.paused = paused

    @property
    def paused(self) -> bool:
        return hasattr(self, "context") and self.context.paused

    async def cancel(self, task_id: str) -> None:
        """The GUI's cancel: the same transition as `POST /v1/responses/{id}/cancel`."""
        if hasattr(self, "downloads"):
            self.downloads.cancelling(task_id, "the window")
        await self.store.tasks.cancel(task_id)

    # -- what the window reads and does (gui/core_api.py's CoreApi) -------------------------
    def subscribe(self, listener: CoreListener) -> None:
        """Tell `listener` about task commits, model news, loaded models and pairing."""

        def loaded(model_id: str, state: str, _progress: float) -> None:
            listener.on_model_loaded(model_id, state)

        self._load_adapters[id(listener)] = loaded
        self.store.tasks.listeners.append(listener.on_task)
        self.registry.listeners.append(listener.on_model)
        self.runner.load_listeners.append(loaded)
        self.pairing.listeners.append(listener.on_pairing)
        self._upstream_adapters[id(listener)] = upstream_news = lambda: listener.on_model(None)
        self.upstreams.listeners.append(upstream_news)

    def unsubscribe(self, listener: CoreListener) -> None:
        loaded = self._load_adapters.pop(id(listener), None)
        if listener.on_task in self.store.tasks.listeners:
            self.store.tasks.listeners.remove(listener.on_task)
        if listener.on_model in self.registry.listeners:
            self.registry.listeners.remove(listener.on_model)
        if loaded in self.runner.load_listeners:
            self.runner.load_listeners.remove(loaded)
        if listener.on_pairing in self.pairing.listeners:
            self.pairing.listeners.remove(listener.on_pairing)
        upstream_news = self._upstream_adapters.pop(id(listener), None)
        if upstream_news in self.upstreams.listeners:
            self.upstreams.listeners.remove(upstream_news)

    async def task_page(
        self, flt: TaskFilter, offset: int, limit: int, sort: str, descending: bool
    ) -> list[TaskRow]:
        rows = await self.store.tasks.page(flt, offset, limit, sort, descending)
        return [TaskRow.of(row) for row in rows]

    async def tasks_by_id(self, ids: Sequence[str], flt: TaskFilter | None = None) -> list[TaskRow]:
        return [TaskRow.of(row) for row in await self.store.tasks.listed_by_id(ids, flt)]

    async def task_counts(self) -> dict[str, int]:
        return await self.store.tasks.counts()

    async def task(self, task_id: str) -> Row:
        return await self.store.tasks.get(task_id)

    async def task_events(
        self, task_id: str, after: int = 0, limit: int = 1000
    ) -> list[dict[str, Any]]:
        return await self.store.tasks.events(task_id, after, limit)

    async def task_event_rows(self, task_id: str, after: int = 0, limit: int = 1000) -> list[Row]:
        return await self.store.tasks.event_rows(task_id, after, limit)

    async def last_recovery_report(self) -> RecoveryReport | None:
        stored = await last_report(self.store.tasks)
        if stored is None:
            return None
        items = [RecoveryItem(**item) for item in stored["items"]]
        report = RecoveryReport(stored["started_at"], stored["finished_at"], items)
        after_quit = await self.store.get_config(RECOVERY_AFTER_QUIT)
        if isinstance(after_quit, dict) and after_quit.get("started_at") == report.started_at:
            report.quit_with_unfinished = int(after_quit["n"])
            report.stopped_by_signal = after_quit.get("signal")
        return report

    async def save_settings(self, settings: Settings) -> None:
        """Store what the user set (never the command line's flags) and apply it now, with
        the flags still on top for this run (folders changed: rescan them)."""
        await self.store.save_settings(settings)
        self.stored_settings = settings
        if self.apply_settings(self._with_flags(settings)):
            self._spawn(self.scan_models())

    async def models(self) -> list[ModelInfo]:
        return await self.registry.list_models()

    def model_problems(self) -> list[str]:
        return [problem.message for problem in self.registry.problems]

    def upstream_statuses(self) -> list[dict[str, Any]]:
        """Each upstream as `upstream list --json` shows it (never its key)."""
        return [status.public() for status in self.upstreams.statuses()]

    async def add_upstream(
        self, name: str, url: str, api_key: str | None, max_concurrency: int
    ) -> None:
        await upstream_store.add_upstream(
            self.store.db, name, url, api_key, max_concurrency=max_concurrency
        )
        await self.upstreams.refresh()  # at once, not at the next poll

    async def remove_upstream(self, name: str) -> None:
        await upstream_store.remove_upstream(self.store.db, name)
        await self.upstreams.refresh()

    def model_loaded_state(self, model_id: str) -> str:
        return self.runner.loaded_state(model_id)

    def prompt_progress(self, task_id: str) -> PromptProgress | None:
        return self.runner.prompt_progress(task_id)

    def first_token_at(self, task_id: str) -> float | None:
        return self.runner.first_token_at(task_id)

    def model_idle_seconds_left(self, model_id: str) -> float | None:
        return self.runner.idle_seconds_left(model_id)

    def model_memory(self, model_id: str) -> int | None:
        pid = self.runner.engine_pid(model_id)
        return None if pid is None else resident_memory(pid)

    def model_loaded_context(self, model_id: str) -> int | None:
        loaded = self.fitter.loaded.get(model_id)
        unloaded = self.runner.loaded_state(model_id) == "unloaded"
        return None if loaded is None or unloaded else loaded.context_length

    def model_crash(self, model_id: str) -> CrashRecord | None:
        return self.runner.last_crash(model_id)

    async def load_model_again(self, model_id: str) -> None:
        try:
            await self.runner.load_again(model_id)
        except EngineError as exc:  # the window shows LmspErrors
            raise LmspError(exc.message, code=exc.code, status=500, type="server_error") from exc

    async def unload_model(self, model_id: str) -> bool:
        return await self.runner.unload(model_id)

    async def add_model_folder(self, folder: Path) -> None:
        """Scan a folder now and keep it: a model folder in the stored settings from now on.
        Kept once its files are recorded, before they are hashed: a quit while a large new
        file was being hashed left the folder unsaved, and its models (and the tasks queued
        for them) missing at the next start."""
        await self.registry.add_folder(folder, wait=False)
        resolved = str(Path(folder).expanduser().resolve())
        known = {str(Path(d).expanduser().resolve()) for d in self.stored_settings.model_dirs}
        if resolved not in known:
            stored = dataclasses.replace(
                self.stored_settings, model_dirs=[*self.stored_settings.model_dirs, resolved]
            )
            await self.store.save_settings(stored)
            self.stored_settings = stored
            if resolved not in self.settings.model_dirs:
                self.settings.model_dirs.append(resolved)

    async def rescan_models(self) -> bool:
        """Scan the model folders again; whether the list changed (a file new, changed or
        gone), which the Models page says when it did not: a Rescan must answer."""
        before = listing(await self.models())
        await self.registry.scan()
        return listing(await self.models()) != before

    async def _downloaded(self, paths: list[Path]) -> None:
        """A finished download lands in the Hugging Face cache: the files it wrote anew are
        new files to the registry (a model pulled again after its folder was deleted is not
        `changed`), and a rescan lists and verifies them."""
        await self.registry.downloaded(paths)
        await self.registry.scan()

    async def verify_model(self, model_id: str, *, accept_new: bool = False) -> ModelInfo:
        return await self.registry.verify(model_id, accept_new=accept_new)

    # -- downloads from the Hugging Face hub ---------------------------------------------
    async def hub_search(self, query: str) -> list[dict[str, Any]]:
        return await search_hub(query)

    async def hub_models(self, repo: str) -> list[GgufChoice]:
        return await repo_models(repo)

    async def pull_model(self, repo: str, selector: str) -> str:
        task = await pull(self.store.tasks, repo, selector)
        return str(task["id"])

    async def hub_downloaded(self, repo: str, choices: list[GgufChoice]) -> set[str]:
        try:
            return await asyncio.to_thread(
                lambda: {choice.name for choice in choices if downloaded(repo, choice)}
            )
        except (OSError, ValueError) as exc:  # an unreadable cache: "not known", not an error
            log.info("cannot tell what of %s is downloaded: %s", repo, exc)
            return set()

    async def hub_memory_plan(self, repo: str, choice: GgufChoice) -> Plan | None:
        """What `choice` would take here (fits / tight / won't fit), from its header on the
        hub and the same plan a local model gets; None when its header cannot be read."""
        try:
            shape = await asyncio.to_thread(remote_shape, repo, choice, hub_token())
        except (OSError, ValueError, LmspError) as exc:
            log.info("no memory estimate for %s/%s: %s", repo, choice.name, exc)
            return None
        fitter = self.fitter
        return await asyncio.to_thread(
            plan_load,
            shape,
            ModelSettings(),
            fitter.budget(),
            fitter.shapes_of,
            default_parallel=fitter.default_parallel(),
            context_cap=fitter.context_cap(),
            cap_origin=fitter.cap_origin,
            gpus=fitter.gpu_free(),
        )

    def hub_token_kept(self) -> bool:
        return stored_token() is not None

    def keep_hub_token(self, token: str | None) -> bool:
        return save_token(token)

    async def model_settings(self, model_id: str) -> ModelSettings:
        return await model_settings_store.get_settings(self.store.db, model_id)

    async def save_model_settings(self, model_id: str, settings: ModelSettings) -> None:
        await self.registry.get(model_id)  # 404 for a model that is gone
        await model_settings_store.save_settings(self.store.db, model_id, settings)

    async def memory_plan(self, model_id: str, settings: ModelSettings) -> Plan | None:
        info = await self.registry.get(model_id)
        if not is_local(info):
            return None
        if self.runner.loaded_state(model_id) != "unloaded":
            # Its memory is in use already: count it as free for a reload with new settings.
            loaded = self.fitter.loaded.get(model_id)
            reclaim = loaded.estimate.total if loaded is not None else 0
        else:
            reclaim = 0
        try:
            return await self.fitter.plan(info, settings, reclaimable=reclaim)
        except (OSError, ValueError):
            return None

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._background.append(task)
        task.add_done_callback(self._background_done)

    def _background_done(self, task: asyncio.Task[Any]) -> None:
        with contextlib.suppress(ValueError):
            self._background.remove(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background work failed", exc_info=task.exception())

    async def _housekeeping(self) -> None:
        while True:
            try:
                purged = await purge_finished(self.store.db, self.settings.retention_days)
                keys = await purge_expired(self.store.db)
                if purged or keys:
                    log.info("retention: purged %d tasks and %d idempotency keys", purged, keys)
            except Exception:
                log.exception("retention run failed; will try again later")
            await asyncio.sleep(RETENTION_EVERY_S)

    # -- shutdown ----------------------------------------------------------------------
    async def stop(self) -> None:
        """Stop accepting, end streams, stop engines, close the store. Unfinished tasks stay
        as they are and are recovered by policy at the next start. Every step runs even when
        an earlier one fails (logged), so the models are unloaded, the store closed and the
        lock released whatever broke; the first failure is raised at the end."""
        if hasattr(self, "context"):
            self.context.shutting_down = True
        steps = StopSteps("stopping the service")
        if hasattr(self, "follower"):
            await steps.run("ending the event streams", self.follower.close)
        await steps.run("cancelling background jobs", self._cancel_background)
        if self.host is not None:  # it closes the sockets it serves on
            await steps.run("closing the HTTP listener", self.host.stop)
        elif self.listener is not None:  # bound but never served on (a start that failed)
            await steps.run("closing the listening sockets", self._close_listener)
        if hasattr(self, "downloads"):
            await steps.run(
                "stopping downloads (their partial files are kept)", self.downloads.stop
            )
        if hasattr(self, "runner"):
            await steps.run("stopping the runner and unloading models", self.runner.stop)
        if hasattr(self, "upstreams"):
            await steps.run("closing upstream connections", self.upstreams.close)
        if hasattr(self, "tokens"):
            await steps.run("closing the token counter", self.tokens.close)
        if hasattr(self, "registry"):
            await steps.run("stopping model hashing", self.registry.close)
        if hasattr(self, "runner"):
            await steps.run("recording the clean stop", self._leave_quit_note)
        await steps.run("closing the store", self.store.close)
        if self.url:  # only the instance that announced itself removes its service.json
            await steps.run("removing service.json", self._remove_service_json)
        await steps.run("releasing the data-directory lock", self._lock.release)
        steps.raise_first()

    async def _cancel_background(self) -> None:
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)

    def _remove_service_json(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._service_json().unlink()

    async def _leave_quit_note(self) -> None:
        """Tell the next start that this stop was on purpose (the user's Quit, or a signal),
        and how much was unfinished."""
        try:
            counts = await self.store.tasks.counts()
            unfinished = sum(counts.get(str(s), 0) for s in UNFINISHED)
            await self.store.set_config(
                QUIT_NOTE,
                {
                    "at": int(time.time()),
                    "unfinished": unfinished,
                    "signal": self.stopped_by_signal,
                },
            )
        except Exception:  # the database may be the reason we stop; recovery still works
            log.exception("could not record the clean stop; the next start calls it unclean")

    def _service_json(self) -> Path:
        return self.data_dir / "service.json"

    def _write_service_json(self) -> None:
        data: dict[str, Any] = {"url": self.url, "pid": os.getpid(), "started_at": int(time.time())}
        if self._flag_max_context is not None:
            # `models list` beside this run shows the contexts it really uses (the flag wins
            # over the stored setting it reads).
            data["max_context"] = self._flag_max_context
        tmp = self._service_json().with_suffix(".tmp")
        # 0600 like every file of the data directory (the umask gave 0644).
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, 0o600)  # one a killed run left behind keeps its mode
        with os.fdopen(fd, "w") as out:
            out.write(json.dumps(data))
        tmp.replace(self._service_json())

    @staticmethod
    def _log_report(report: RecoveryReport) -> None:
        if not report.items:
            log.info("recovery: nothing to recover")
            return
        count = len(report.items)
        log.warning(
            "recovery: %d %s %s: %s",
            count,
            "task" if count == 1 else "tasks",
            report.cause(),
            report.summary(),
        )
        shown = report.items[:LOGGED_ITEMS]
        if len(report.items) > len(shown):
            log.warning(
                "recovery: listing the first %d; GET /v1/recovery/last has all %d",
                len(shown),
                len(report.items),
            )
        for item in shown:
            log.warning(
                "recovered %s (%s): %s --%s--> %s, %s #%d",
                item.task_id,
                item.model,
                item.state_before,
                item.on_restart,
                item.state_after,
                item.event_type,
                item.sequence_number,
            )
