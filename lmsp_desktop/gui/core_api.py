"""The one typed seam between the window and the core: what the window may ask and hear.

The real `Core` (lmsp_desktop/app.py) and the tests' fake core both implement `CoreApi`;
mypy checks both against it. The window never reaches past it into the store, the runner's
slots or the registry's tables, so those can change without touching a widget: the types it
names are the core's (core/views.py), never the store's, and tests/unit/test_import_graph.py
keeps it so.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from lmsp_desktop.core.config import Settings
from lmsp_desktop.core.crashes import CrashRecord
from lmsp_desktop.core.downloads.hub import GgufChoice
from lmsp_desktop.core.models.info import ModelInfo
from lmsp_desktop.core.models.memory import ModelSettings, Plan
from lmsp_desktop.core.views import (
    CoreListener,
    PromptProgress,
    Record,
    RecoveryReport,
    TaskFilter,
    TaskRow,
)

__all__ = ["CoreApi", "CoreListener"]


class CoreApi(Protocol):
    """Everything the window does with the running service."""

    @property
    def data_dir(self) -> Path: ...

    @property
    def url(self) -> str: ...

    @property
    def settings(self) -> Settings:
        """What this run uses (the stored settings with command-line flags on top)."""
        ...

    @property
    def stored_settings(self) -> Settings:
        """What the user set: what Settings shows and saves."""
        ...

    @property
    def command_line(self) -> dict[str, str]:
        """Settings this run takes from command-line flags (name → flag); never saved."""
        ...

    @property
    def chosen_port(self) -> tuple[int, int] | None:
        """(port used, port in use it replaced) when the port was chosen at start, for this
        run only; None otherwise."""
        ...

    @property
    def paused(self) -> bool: ...

    # -- news ------------------------------------------------------------------------------
    def subscribe(self, listener: CoreListener) -> None: ...

    def unsubscribe(self, listener: CoreListener) -> None: ...

    # -- tasks -----------------------------------------------------------------------------
    async def submit(
        self,
        model: str,
        prompt: str,
        on_restart: str | None = None,
        *,
        max_output_tokens: int | None = None,
    ) -> str: ...

    async def cancel(self, task_id: str) -> None: ...

    def pause(self, paused: bool) -> None: ...

    async def task_page(
        self, flt: TaskFilter, offset: int, limit: int, sort: str, descending: bool
    ) -> list[TaskRow]: ...

    async def tasks_by_id(
        self, ids: Sequence[str], flt: TaskFilter | None = None
    ) -> list[TaskRow]: ...

    async def task_counts(self) -> dict[str, int]: ...

    def prompt_progress(self, task_id: str) -> PromptProgress | None:
        """How far a running task's prompt has been read, while it is (the runner's memory:
        a dictionary look-up, cheap enough for a table cell's paint)."""
        ...

    def first_token_at(self, task_id: str) -> float | None:
        """When a running task's output began (the runner's memory, a dictionary look-up;
        the task's end stores it): the Speed column's generation time starts there."""
        ...

    async def task(self, task_id: str) -> Record: ...

    async def task_events(
        self, task_id: str, after: int = 0, limit: int = 1000
    ) -> list[dict[str, Any]]: ...

    async def task_event_rows(
        self, task_id: str, after: int = 0, limit: int = 1000
    ) -> Sequence[Record]: ...

    async def last_recovery_report(self) -> RecoveryReport | None: ...

    # -- settings --------------------------------------------------------------------------
    async def save_settings(self, settings: Settings) -> None: ...

    # -- models ----------------------------------------------------------------------------
    async def models(self) -> list[ModelInfo]: ...

    def model_problems(self) -> list[str]:
        """What the last model scan could not list, and what to do (one sentence each)."""
        ...

    def model_loaded_state(self, model_id: str) -> str: ...

    def model_idle_seconds_left(self, model_id: str) -> float | None: ...

    def model_memory(self, model_id: str) -> int | None:
        """Resident memory of the engine processes holding the model (weights, KV cache,
        buffers); None when no worker process holds it or the system does not say."""
        ...

    def model_loaded_context(self, model_id: str) -> int | None:
        """The context a loaded (or loading) model was loaded with (what /api/ps says);
        None while it is not loaded."""
        ...

    def model_crash(self, model_id: str) -> CrashRecord | None:
        """The model's last engine crash since the service started (docs/engine.md)."""
        ...

    async def load_model_again(self, model_id: str) -> None:
        """Load a model (after a crash; a model held after two crashes is released)."""
        ...

    async def unload_model(self, model_id: str) -> bool:
        """Unload a model now, or once its running tasks end; True when unloaded now."""
        ...

    async def add_model_folder(self, folder: Path) -> None: ...

    async def rescan_models(self) -> bool:
        """Scan the model folders again; whether the list changed."""
        ...

    async def verify_model(self, model_id: str, *, accept_new: bool = False) -> ModelInfo: ...

    # -- downloads from the Hugging Face hub ------------------------------------------------
    async def hub_search(self, query: str) -> list[dict[str, Any]]: ...

    async def hub_models(self, repo: str) -> list[GgufChoice]: ...

    async def pull_model(self, repo: str, selector: str) -> str:
        """Create the download task (as the owner); its id."""
        ...

    async def hub_memory_plan(self, repo: str, choice: GgufChoice) -> Plan | None:
        """What the file would take here (fits / tight / won't fit); None when unknown."""
        ...

    async def hub_downloaded(self, repo: str, choices: list[GgufChoice]) -> set[str]:
        """The names of the choices already whole in the Hugging Face cache."""
        ...

    def hub_token_kept(self) -> bool:
        """Whether a Hugging Face token is kept in the keyring."""
        ...

    def keep_hub_token(self, token: str | None) -> bool:
        """Keep (or with None forget) the token in the keyring; False when there is none."""
        ...

    async def model_settings(self, model_id: str) -> ModelSettings:
        """A local model's own load settings, as stored (None fields: the service decides)."""
        ...

    async def save_model_settings(self, model_id: str, settings: ModelSettings) -> None:
        """Store them; they apply at the model's next load."""
        ...

    async def memory_plan(self, model_id: str, settings: ModelSettings) -> Plan | None:
        """What loading the model with `settings` would take, against the memory free now
        (None: not a local model, or its header cannot be read)."""
        ...

    # -- pairing ---------------------------------------------------------------------------
    async def pending_pairings(self, *, include_ignored: bool = False) -> list[dict[str, Any]]: ...

    async def approve_pairing(self, pairing_id: str, scopes: frozenset[str]) -> None: ...

    async def deny_pairing(self, pairing_id: str) -> None: ...

    async def ignore_pairing(self, pairing_id: str) -> None: ...

    async def pairing_outcome(self, pairing_id: str) -> str | None:
        """How a request stands now (approved, denied, ignored, pending, expired; None: no
        such request): what the page says when an answer finds it already answered."""
        ...

    async def create_claim_code(self, scopes: frozenset[str]) -> dict[str, Any]: ...

    async def end_claim_code(self, pairing_id: str) -> None: ...

    async def claim_code_status(self, pairing_id: str) -> dict[str, Any]: ...

    # -- clients ---------------------------------------------------------------------------
    async def clients(self) -> list[dict[str, Any]]: ...

    async def revoke_client(self, client_id: str) -> None: ...

    async def create_client_token(self, name: str, scopes: frozenset[str]) -> str:
        """A new client and its token (returned once, stored only as a hash)."""
        ...

    async def set_client_scopes(self, client_id: str, scopes: frozenset[str]) -> None: ...

    # -- upstreams (servers that run tasks of models named NAME/<model>) -------------------
    def upstream_statuses(self) -> list[dict[str, Any]]: ...

    async def add_upstream(
        self, name: str, url: str, api_key: str | None, max_concurrency: int
    ) -> None: ...

    async def remove_upstream(self, name: str) -> None: ...
