"""A fake of the window's core (`CoreApi`) for GUI unit tests: a real store and pairing
manager, with the runner replaced by dicts the test controls and the model registry by a
list (or a real `ModelRegistry`, when a test wants real hashing).

mypy checks this class against `CoreApi` (see `_is_a_core_api` and pyproject's mypy files),
so the fake cannot drift from what the real `Core` offers the window.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lmsp_desktop.core.api.responses.request import parse_create
from lmsp_desktop.core.client_calls import ClientCalls
from lmsp_desktop.core.config import Settings
from lmsp_desktop.core.crashes import CrashRecord
from lmsp_desktop.core.downloads.hub import GgufChoice, downloaded
from lmsp_desktop.core.downloads.pull import pull, repo_models, search_hub
from lmsp_desktop.core.downloads.token import save_token, stored_token
from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.models.gguf_meta import GGUFMeta
from lmsp_desktop.core.models.info import ModelEvent, ModelInfo
from lmsp_desktop.core.models.memory import (
    Budget,
    ModelSettings,
    ModelShape,
    Plan,
    one_context,
    plan,
)
from lmsp_desktop.core.models.registry import ModelRegistry
from lmsp_desktop.core.pairing import PairingManager
from lmsp_desktop.core.states import RestartPolicy
from lmsp_desktop.core.storage import model_settings as model_settings_store
from lmsp_desktop.core.storage import upstreams as upstream_store
from lmsp_desktop.core.storage.recovery import last_report
from lmsp_desktop.core.storage.store import Store
from lmsp_desktop.core.storage.tasks import NewTask, Row
from lmsp_desktop.core.views import (
    PromptProgress,
    RecoveryItem,
    RecoveryReport,
    TaskFilter,
    TaskRow,
)
from lmsp_desktop.gui.core_api import CoreApi, CoreListener


def fake_model(model_id: str, state: str = "verified") -> ModelInfo:
    return ModelInfo(
        id=model_id,
        path=Path(f"/models/{model_id}.gguf"),
        size_bytes=98_000_000,
        mtime_ns=0,
        digest="sha256:" + "ab" * 32,
        state=state,
        verified_at=1_700_000_000,
        architecture="llama",
        parameters=134_515_008,
        quantization="Q4_1",
        context_length=8192,
        created_at=1_700_000_000,
    )


@dataclass
class FakeCore(ClientCalls):
    """Tasks, clients and pairing are real (in `store`); models and loading are scripted."""

    store: Store
    data_dir: Path
    pairing: PairingManager
    registry: ModelRegistry | None = None  # when set, models come from it
    models_list: list[ModelInfo] = field(default_factory=lambda: [fake_model("smollm2")])
    loaded: dict[str, str] = field(default_factory=dict)
    idle_left: dict[str, float] = field(default_factory=dict)
    engine_memory: dict[str, int] = field(default_factory=dict)  # model_memory
    loaded_contexts: dict[str, int] = field(default_factory=dict)  # model_loaded_context
    crashes: dict[str, CrashRecord] = field(default_factory=dict)
    settings: Settings = field(default_factory=Settings)
    stored_settings: Settings = field(default_factory=Settings)
    command_line: dict[str, str] = field(default_factory=dict)
    chosen_port: tuple[int, int] | None = None
    url: str = "http://127.0.0.1:5677"
    paused: bool = False
    memory: Budget = field(default_factory=lambda: Budget(16 << 30, 12 << 30, "MemAvailable"))
    submitted: list[str] = field(default_factory=list)
    verified: list[str] = field(default_factory=list)
    folders: list[Path] = field(default_factory=list)
    listeners: list[CoreListener] = field(default_factory=list)
    # Verify answers with this state (e.g. "changed") instead of the model's own.
    verify_state: str | None = None
    # Upstreams as the core's catalog would report them after a probe (name → status).
    upstreams: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Prompt reads under way, as the runner would report them (task id → progress).
    prompt_reads: dict[str, PromptProgress] = field(default_factory=dict)
    # Running tasks' first output token times, as the runner would report them.
    first_tokens: dict[str, float] = field(default_factory=dict)

    # -- news --------------------------------------------------------------------------
    def subscribe(self, listener: CoreListener) -> None:
        self.listeners.append(listener)
        self.store.tasks.listeners.append(listener.on_task)
        self.pairing.listeners.append(listener.on_pairing)
        if self.registry is not None:
            self.registry.listeners.append(listener.on_model)

    def unsubscribe(self, listener: CoreListener) -> None:
        if listener in self.listeners:
            self.listeners.remove(listener)
            self.store.tasks.listeners.remove(listener.on_task)
            self.pairing.listeners.remove(listener.on_pairing)
            if self.registry is not None:
                self.registry.listeners.remove(listener.on_model)

    def announce_models(self, event: ModelEvent | None = None) -> None:
        """As the registry does after a scan (None: "the list changed")."""
        for listener in list(self.listeners):
            listener.on_model(event)

    def announce_loaded(self, model_id: str, state: str) -> None:
        self.loaded[model_id] = state
        for listener in list(self.listeners):
            listener.on_model_loaded(model_id, state)

    # -- tasks -------------------------------------------------------------------------
    async def submit(
        self,
        model: str,
        prompt: str,
        on_restart: str | None = None,
        *,
        max_output_tokens: int | None = None,
    ) -> str:
        if not prompt.strip():
            raise LmspError("Write a prompt first.", code="invalid_value")
        body: dict[str, Any] = {"model": model, "input": prompt, "background": True}
        if max_output_tokens is not None:
            body["max_output_tokens"] = max_output_tokens
        request = parse_create(body, on_restart or self.settings.default_on_restart)
        result = await self.store.tasks.create(
            NewTask(model=model, request=request, on_restart=RestartPolicy(request["on_restart"]))
        )
        self.submitted.append(result.task_id)
        return result.task_id

    async def cancel(self, task_id: str) -> None:
        await self.store.tasks.cancel(task_id)  # a FakeRunner (helpers) may confirm it

    def pause(self, paused: bool) -> None:
        self.paused = paused

    async def task_page(
        self, flt: TaskFilter, offset: int, limit: int, sort: str, descending: bool
    ) -> list[TaskRow]:
        rows = await self.store.tasks.page(flt, offset, limit, sort, descending)
        return [TaskRow.of(row) for row in rows]

    async def tasks_by_id(self, ids: Sequence[str], flt: TaskFilter | None = None) -> list[TaskRow]:
        return [TaskRow.of(row) for row in await self.store.tasks.listed_by_id(ids, flt)]

    async def task_counts(self) -> dict[str, int]:
        return await self.store.tasks.counts()

    def prompt_progress(self, task_id: str) -> PromptProgress | None:
        return self.prompt_reads.get(task_id)

    def first_token_at(self, task_id: str) -> float | None:
        return self.first_tokens.get(task_id)

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
        return RecoveryReport(stored["started_at"], stored["finished_at"], items)

    # -- settings ----------------------------------------------------------------------
    async def save_settings(self, settings: Settings) -> None:
        await self.store.save_settings(settings)
        self.stored_settings = self.settings = settings

    # -- models ------------------------------------------------------------------------
    async def models(self) -> list[ModelInfo]:
        if self.registry is not None:
            return await self.registry.list_models()
        return list(self.models_list)

    def model_problems(self) -> list[str]:
        return [p.message for p in self.registry.problems] if self.registry is not None else []

    def model_loaded_state(self, model_id: str) -> str:
        return self.loaded.get(model_id, "unloaded")

    def model_idle_seconds_left(self, model_id: str) -> float | None:
        return self.idle_left.get(model_id)

    def model_memory(self, model_id: str) -> int | None:
        return self.engine_memory.get(model_id)

    def model_loaded_context(self, model_id: str) -> int | None:
        return self.loaded_contexts.get(model_id)

    def model_crash(self, model_id: str) -> CrashRecord | None:
        return self.crashes.get(model_id)

    async def load_model_again(self, model_id: str) -> None:
        self.crashes.pop(model_id, None)
        self.loaded[model_id] = "loaded"

    async def unload_model(self, model_id: str) -> bool:
        self.loaded.pop(model_id, None)
        return True

    async def add_model_folder(self, folder: Path) -> None:
        self.folders.append(folder)
        if self.registry is not None:
            await self.registry.add_folder(folder)

    async def rescan_models(self) -> bool:
        before = [(m.id, m.state, m.path, m.mtime_ns, m.digest) for m in await self.models()]
        if self.registry is not None:
            await self.registry.scan()
        self.announce_models()
        return [
            (m.id, m.state, m.path, m.mtime_ns, m.digest) for m in await self.models()
        ] != before

    async def verify_model(self, model_id: str, *, accept_new: bool = False) -> ModelInfo:
        self.verified.append(model_id)
        if self.registry is not None:
            return await self.registry.verify(model_id, accept_new=accept_new)
        info = next(m for m in self.models_list if m.id == model_id)
        if self.verify_state is not None and not accept_new:
            info.state = self.verify_state
        return info

    # -- downloads from the Hugging Face hub ---------------------------------------------
    async def hub_search(self, query: str) -> list[dict[str, Any]]:
        return await search_hub(query)

    async def hub_models(self, repo: str) -> list[GgufChoice]:
        return await repo_models(repo)

    async def pull_model(self, repo: str, selector: str) -> str:
        task = await pull(self.store.tasks, repo, selector)
        return str(task["id"])

    async def hub_downloaded(self, repo: str, choices: list[GgufChoice]) -> set[str]:
        return await asyncio.to_thread(
            lambda: {choice.name for choice in choices if downloaded(repo, choice)}
        )

    async def hub_memory_plan(self, repo: str, choice: GgufChoice) -> Plan | None:
        return None  # no memory planner in the fake: the dialog shows the size alone

    def hub_token_kept(self) -> bool:
        return stored_token() is not None

    def keep_hub_token(self, token: str | None) -> bool:
        return save_token(token)

    async def model_settings(self, model_id: str) -> ModelSettings:
        return await model_settings_store.get_settings(self.store.db, model_id)

    async def save_model_settings(self, model_id: str, settings: ModelSettings) -> None:
        await model_settings_store.save_settings(self.store.db, model_id, settings)

    async def memory_plan(self, model_id: str, settings: ModelSettings) -> Plan | None:
        """The real planner on a demo-sized model (30 layers, 23 KB of KV cache a token)
        against `memory`, which a test sets to make a load fit, be tight or not fit."""
        info = next(m for m in await self.models() if m.id == model_id)  # the registry's too
        meta = GGUFMeta(3, 0, architecture="llama", context_length=info.context_length)
        meta.values = {
            "llama.block_count": 30,
            "llama.embedding_length": 576,
            "llama.attention.head_count": 9,
            "llama.attention.head_count_kv": 3,
        }
        meta.vocab_size = 49152
        shape = ModelShape.from_gguf(meta, info.size_bytes)
        return plan(shape, settings, self.memory, one_context, default_parallel=4)

    # -- upstreams ---------------------------------------------------------------------
    def upstream_statuses(self) -> list[dict[str, Any]]:
        return [self.upstreams[name] for name in sorted(self.upstreams)]

    async def add_upstream(
        self, name: str, url: str, api_key: str | None, max_concurrency: int
    ) -> None:
        row = await upstream_store.add_upstream(
            self.store.db, name, url, api_key, max_concurrency=max_concurrency
        )
        self.upstreams[name] = {
            **row.public(),
            "reachable": False,
            "latency_ms": None,
            "model_count": 0,
            "models": [],
            "error": "not probed yet",
        }

    async def remove_upstream(self, name: str) -> None:
        await upstream_store.remove_upstream(self.store.db, name)
        self.upstreams.pop(name, None)


def _is_a_core_api(core: FakeCore) -> CoreApi:
    return core  # mypy fails here when FakeCore stops matching CoreApi
