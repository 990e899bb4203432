"""The scheduler: per-model queues in submission order, single-flight model loading, idle
unload, cancel within one token, and exact resume from snapshots."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from functools import lru_cache, partial
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from lmsp_desktop.core.api.task_request import chat_messages
from lmsp_desktop.core.crashes import CrashLog, CrashRecord
from lmsp_desktop.core.engines.base import (
    EmbeddingRequest,
    Embeds,
    EndingSink,
    Engine,
    EngineCrashed,
    EngineError,
    GenerationRequest,
    GenerationResult,
    LoadedModel,
    LoadSettings,
    PromptProgress,
    TokenPiece,
)
from lmsp_desktop.core.engines.prefix_cache import CachesPrefixes, PrefixStats
from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.listeners import notify
from lmsp_desktop.core.shutdown import StopSteps
from lmsp_desktop.core.states import RUNNER_KINDS, TaskKind, TaskState
from lmsp_desktop.core.stops import StopScanner
from lmsp_desktop.core.storage.embeddings import finish_embedding
from lmsp_desktop.core.storage.events import to_json
from lmsp_desktop.core.storage.recovery import recover_after_crash
from lmsp_desktop.core.storage.requeue import requeue_for_retry
from lmsp_desktop.core.storage.tasks import TaskStore, finishing
from lmsp_desktop.core.storage.transitions import prompt_length_kept
from lmsp_desktop.core.tool_output import CallingOutput
from lmsp_desktop.core.tools.grammars import max_calls
from lmsp_desktop.core.tools.plan import plan_output
from lmsp_desktop.core.views import TaskChange

log = logging.getLogger(__name__)
STORE_RETRY_S = 1.0  # pause before retrying after the store refused a write (disk full)
# Text reaches clients in commits (rule 11.2: nothing is sent before it is saved), at most
# one per task every COMMIT_INTERVAL_S: the tokens a fast model makes meanwhile share one
# hand-over from the engine worker, one commit, its fsync and one SSE write (still one delta
# event per token). Each such group costs the service about 1.5 ms of CPU whatever its size
# (the worker's message read, the writer thread's round trip and fsync, the loop's steps
# and the SSE write; the client pays its read too), which the model, decoding on every core,
# loses from its own tokens. B3 measured 0.85x the engine in-process committing every token;
# at 50 ms, 2.4 tokens a group at 48 tokens/s, the service took 0.7-1.0 ms of CPU per token
# and B3 read 0.95-1.03x; at 100 ms 0.4-0.55 ms (docs/engine.md, "Per-token cost"). 100 ms is
# 10 updates a second, smooth for reading; a model slower than 10 tokens/s still commits
# every token. The first token is never held back, nor is the end, nor a cancel.
COMMIT_INTERVAL_S = 0.1


class SnapshotTokens:
    """A snapshot's JSON with its token list encoded as the tokens come, not all over again
    at every commit (a long generation would otherwise cost O(n) per token)."""

    def __init__(self, tokens: list[int]) -> None:
        self.tokens = tokens  # the list the generation extends
        self._encoded = ",".join(map(str, tokens))
        self._count = len(tokens)

    def snapshot(self, rest: dict[str, Any]) -> str:
        """`{"tokens": [...], **rest}` as JSON."""
        if self._count < len(self.tokens):
            more = ",".join(map(str, self.tokens[self._count :]))
            self._encoded = f"{self._encoded},{more}" if self._encoded else more
            self._count = len(self.tokens)
        others = to_json(rest)[1:-1]  # orjson: a tenth of json.dumps on this hot path (B2)
        return f'{{"tokens":[{self._encoded}]{", " if others else ""}{others}}}'


def through_stops(
    stops: StopScanner, pieces: list[TokenPiece]
) -> tuple[list[TokenPiece], list[str], bool]:
    """Feed a hand-over's tokens to the stop scanner one at a time: the tokens up to the one
    that completed a stop sequence (all of them when none did), the text they release (one
    delta per token that releases any), and whether a stop sequence was reached."""
    deltas: list[str] = []
    for n, piece in enumerate(pieces):
        if not piece.text:
            continue
        released, stopped = stops.feed(piece.text)
        if released:
            deltas.append(released)
        if stopped:
            return pieces[: n + 1], deltas, True
    return pieces, deltas, False


def finish_values(result: GenerationResult) -> dict[str, Any]:
    """What a task's finish records of its generation's result (TaskStore.finish)."""
    reason = None
    if result.finish_reason == "length":
        reason = "max_output_tokens"
    elif result.finish_reason == "context":
        reason = "max_output_tokens"  # the model's context ran out (OpenAI's word for it)
    return {
        "incomplete_reason": reason,
        "input_tokens": result.input_tokens,
        "output_tokens": result.output_tokens,
        # A task resumed after a restart reports the reuse of the run that finished it (its
        # prompt evaluated again, usually from an empty cache: 0), matching its input_tokens,
        # which are that run's too; the first run's count is not kept.
        "cached_tokens": result.cached_tokens,
    }


class ModelPaths(Protocol):
    """What the runner needs of the model registry."""

    async def path_for_run(self, model_id: str) -> Path: ...


class RemoteEngines(Protocol):
    """Engines running on other machines (upstreams), chosen by model id."""

    def engine_for(self, model_id: str) -> Engine | None: ...

    def parallel_for(self, model_id: str) -> int: ...


@runtime_checkable
class ReportsCrashes(Protocol):
    """A loaded model whose engine process can die by itself (engine workers)."""

    crash: EngineCrashed | None  # set once its process died unasked

    def when_crashed(self, callback: Callable[[EngineCrashed], None]) -> None: ...


def _crash_of(model: LoadedModel) -> EngineCrashed | None:
    """How the model's engine process died, if it did (models that can die report it)."""
    return model.crash if isinstance(model, ReportsCrashes) else None


# How to load a local model (context, sequences, KV type, GPU layers), decided just before
# its load against the memory available; raises EngineError (insufficient_memory) when the
# load cannot fit, so nothing is allocated.
SettingsOf = Callable[[str], Awaitable[LoadSettings]]


@dataclass
class _Slot:
    """A loaded (or loading) model and when it was last used."""

    loading: asyncio.Future[LoadedModel]
    model: LoadedModel | None = None
    remote: bool = False  # an upstream's model: no memory here, not counted against the limit
    busy: int = 0  # takers (_acquire) that have not given it back (_give_back)
    last_used: float = field(default_factory=time.monotonic)
    # Idle seconds before unloading, as the last request on it asked (Ollama's keep_alive;
    # negative: never); None: the runner's idle_unload_s.
    keep_alive: float | None = None
    unload_when_idle: bool = False  # the user unloaded it while a task ran on it


@dataclass
class _Unrecorded:
    """Why the store refuses to record a task's failure, since when (monotonic), and how
    many tries it has refused so far."""

    reason: str
    since: float
    tries: int = 1


def _lane(model: str, index: int) -> str:
    """Lane 0 of a model is the model id itself; further lanes add `\x00<n>`."""
    return model if index == 0 else f"{model}\x00{index}"


@lru_cache(maxsize=1024)
def _lanes(model: str, count: int) -> tuple[str, ...]:
    """The names of a model's `count` lanes (each create wakes them: made once, B1)."""
    return tuple(_lane(model, index) for index in range(count))


def _model_of(lane: str) -> str:
    return lane.split("\x00", 1)[0]


class Runner:
    """Runs queued tasks through an engine; the store decides every state change."""

    def __init__(
        self,
        tasks: TaskStore,
        models: ModelPaths,
        engine: Engine,
        *,
        max_loaded_models: int = 1,
        idle_unload_s: float = 600.0,
        parallel_per_model: int = 1,
        remote: RemoteEngines | None = None,
        settings_of: SettingsOf | None = None,
        commit_interval: float = COMMIT_INTERVAL_S,
    ) -> None:
        self.tasks = tasks
        self.commit_interval = commit_interval
        self.settings_of = settings_of
        self.models = models
        self.engine = engine
        self.max_loaded_models = max_loaded_models
        self.idle_unload_s = idle_unload_s
        self._idle_changed = asyncio.Event()  # a keep_alive changed: look again now
        # N lanes run N tasks of one model at once. Local lanes share the one loaded copy
        # (the llama engine decodes their sequences together); each upstream lane has its own
        # connection to the upstream.
        self.parallel_per_model = parallel_per_model
        # A local model's own concurrency (its per-model setting), else the global one.
        self.model_parallel: dict[str, int] = {}
        self.remote = remote
        self._slots: dict[str, _Slot] = {}  # model id (upstream: lane) → its loaded model
        self._unloaded_prefix_stats = PrefixStats()  # of models unloaded since the start
        self._claimed: set[str] = set()  # task ids a lane is running right now
        self._wakeups: dict[str, asyncio.Event] = {}
        self._woken: set[str] = set()  # models a commit woke in this loop turn (_on_change)
        self._workers: dict[str, asyncio.Task[None]] = {}
        # task id → its running generation or embedding (the runner only sets its cancel)
        self._active: dict[str, GenerationRequest | EmbeddingRequest] = {}
        # How far each running generation's prompt has been read, from the engine's reports
        # (kept here only, never written per step: the task object and the window show it
        # while the prompt is read), and which of them are still reading (no token yet).
        self._prompts: dict[str, PromptProgress] = {}
        self._reading: set[str] = set()
        # When each running generation's first output token came (time.time(), its current
        # run's), from its first token to the end of its run: the window's Speed while it
        # runs; the move that ends the task stores it (tasks.first_token_at).
        self._first_tokens: dict[str, float] = {}
        # Unloads under way: stop() waits for them, so one begun by the idle timer or to make
        # room is never cut short by the stop cancelling its caller.
        self._unloads: set[asyncio.Task[None]] = set()
        # Tasks waiting for their model's load → set when one is cancelled meanwhile: its
        # cancel is confirmed at once, not when the load ends (a big model loads for minutes).
        self._load_cancels: dict[str, asyncio.Event] = {}
        # Tasks whose failure the store refused to record (the disk is full) → why, since when
        # and how many tries: said once when it begins (and when the reason changes) and once
        # when a write goes through again, not at every retry (a full disk filled the log
        # with the same line every few seconds, hiding everything else).
        self._unrecorded: dict[str, _Unrecorded] = {}
        # Loads whose task was cancelled meanwhile: they go on for the next task of the model
        # (the model then stays for its idle time); stop() ends them like the lanes.
        self._loads_left: set[asyncio.Task[_Slot]] = set()
        self._stopping = False
        self.crashes = CrashLog()  # engine processes that died, by model
        self._janitor: asyncio.Task[None] | None = None
        self.load_listeners: list[Callable[[str, str, float], None]] = []  # model, state, progress

    # -- lifecycle ---------------------------------------------------------------------
    async def start(self) -> None:
        """Pick up tasks left queued or resumed-running by recovery, then follow new ones."""
        self.tasks.listeners.append(self._on_change)
        # Downloads have their own manager.
        waiting = [TaskState.QUEUED, TaskState.RUNNING]
        for model in await self.tasks.models_with(waiting, sorted(RUNNER_KINDS)):
            self._wake(model)
        self._janitor = asyncio.create_task(self._unload_idle_forever())

    async def stop(self) -> None:
        """Stop generating; unfinished tasks stay as they are for recovery at the next start."""
        self._stopping = True
        with contextlib.suppress(ValueError):
            self.tasks.listeners.remove(self._on_change)
        await self._keep_prompt_lengths(self._reading)
        for request in self._active.values():
            request.cancel.set()
        workers = [
            *self._workers.values(),
            *self._loads_left,
            *([self._janitor] if self._janitor else []),
        ]
        for worker in workers:
            worker.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        # Each model is unloaded even if another one's unload fails: one left loaded would be
        # freed during interpreter exit (the SIGSEGV this ordering exists to prevent).
        steps = StopSteps("stopping the runner")
        for unloading in list(self._unloads):
            finish = partial(asyncio.shield, unloading)
            await steps.run("finishing an unload begun before the stop", finish)
        for lane, slot in self._slots.items():
            if slot.model is not None:
                await steps.run(f"unloading {lane!r}", slot.model.unload)
        self._slots.clear()
        steps.raise_first()

    def prompt_progress(self, task_id: str) -> PromptProgress | None:
        """How far a running task's prompt has been read, while it is (None before the
        engine said, once output has begun, and for tasks not running here)."""
        return self._prompts.get(task_id) if task_id in self._reading else None

    def first_token_at(self, task_id: str) -> float | None:
        """When a running generation's first output token came (its current run's), None
        before it; the move that ends the task stores it."""
        return self._first_tokens.get(task_id)

    def input_tokens_of(self, task_id: str) -> int | None:
        """A running generation's prompt length as soon as the engine knows it (the store
        has it with the first output commit)."""
        progress = self._prompts.get(task_id)
        return None if progress is None else progress.total

    def lanes_of(self, model_id: str) -> int:
        """How many tasks of a local model run at once."""
        return self.model_parallel.get(model_id) or self.parallel_per_model

    def _lanes_of(self, model_id: str) -> list[_Slot]:
        return [slot for lane, slot in self._slots.items() if _model_of(lane) == model_id]

    def loaded_state(self, model_id: str) -> str:
        """unloaded, loading or loaded: for the models list and the GUI."""
        # The lanes of _lanes_of, looked at in one loop (each create asks, B1).
        state = "unloaded"
        lane_prefix = model_id + "\x00"
        for lane, slot in self._slots.items():
            if lane == model_id or lane.startswith(lane_prefix):
                if slot.model is not None:
                    return "loaded"
                state = "loading"
        return state

    def idle_seconds_left(self, model_id: str) -> float | None:
        """Seconds until an idle loaded model is unloaded; None while busy or not loaded."""
        slots = self._lanes_of(model_id)
        if not slots or any(s.model is None or s.busy for s in slots):
            return None
        last_used = max(s.last_used for s in slots)
        limit = max(self._idle_limit(s) for s in slots)
        if limit == float("inf"):
            return None
        return max(0.0, limit - (time.monotonic() - last_used))

    def _idle_limit(self, slot: _Slot) -> float:
        if slot.keep_alive is None:
            return self.idle_unload_s
        return float("inf") if slot.keep_alive < 0 else slot.keep_alive

    # -- reacting to commits -----------------------------------------------------------
    def _on_change(self, change: TaskChange) -> None:
        if change.kind not in RUNNER_KINDS:
            return  # a download: core/downloads/manager.py runs it
        if change.state == TaskState.QUEUED:
            # The creates of one commit are heard in one loop turn: the first wakes the
            # model's lanes, which then read the queue after those commits, so the others
            # need not wake them again (B1: a wake per create). Forgotten at the next turn.
            if change.model in self._woken:
                return
            if not self._woken:
                asyncio.get_running_loop().call_soon(self._woken.clear)
            self._woken.add(change.model)
            self._wake(change.model)
        elif change.state == TaskState.CANCELLING and change.task_id in self._active:
            self._active[change.task_id].cancel.set()  # the engine stops before the next token
        elif change.state == TaskState.CANCELLING and change.task_id in self._load_cancels:
            self._load_cancels[change.task_id].set()  # it waits for its model's load

    def _wake(self, model: str) -> None:
        if self._stopping:
            return
        remote = self.remote.engine_for(model) if self.remote else None
        lanes = self.remote.parallel_for(model) if self.remote and remote else None
        for lane in _lanes(model, lanes or self.lanes_of(model)):
            wakeup = self._wakeups.get(lane)  # not setdefault: an Event made per create (B1)
            if wakeup is None:
                wakeup = self._wakeups[lane] = asyncio.Event()
            wakeup.set()
            worker = self._workers.get(lane)
            if worker is None or worker.done():
                self._workers[lane] = asyncio.create_task(
                    self._work(model, lane), name=f"runner:{lane}"
                )

    # -- the per-lane worker -----------------------------------------------------------
    async def _work(self, model: str, lane: str) -> None:
        wakeup = self._wakeups[lane]
        while not self._stopping:
            wakeup.clear()
            row = await self._next_task(model)
            if row is None:
                await wakeup.wait()
                continue
            try:
                await self._run(row, lane)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                await self._give_up(row["id"], exc)
            else:  # its run's writes went through: a store that refused them takes them again
                self._store_took(row["id"], "ran on from its snapshot")
            finally:
                self._claimed.discard(row["id"])

    async def _give_up(self, task_id: str, exc: Exception) -> None:
        """A task's run failed: fail it with a clear code. If even that cannot be written (the
        disk is full), wait and let the loop pick the task up again: it is still running and
        resumes from its snapshot once the store accepts writes."""
        if isinstance(exc, LmspError):
            code, message = exc.code, exc.message
        else:  # a bug: keep the worker alive, fail the task clearly
            log.exception("task %s failed unexpectedly", task_id)
            code, message = "internal_error", f"Internal error: {exc!r}"
        try:
            await self.tasks.fail(task_id, code, message)
        except Exception as refused:
            # The disk is full, or any other refusal: the lane lives on and retries (one
            # that died here left its task running for ever, and its model a lane short).
            self._store_refused(
                task_id, refused.message if isinstance(refused, LmspError) else repr(refused)
            )
            await asyncio.sleep(STORE_RETRY_S)
        else:
            self._store_took(task_id, "has its failure recorded")

    def _store_refused(self, task_id: str, reason: str) -> None:
        """The store refused to record a task's failure: a warning when this begins or its
        reason changes, a debug line at each further try."""
        now = time.monotonic()
        known = self._unrecorded.get(task_id)
        if known is not None and known.reason == reason:
            known.tries += 1
            log.debug("still cannot record the failure of %s (try %d)", task_id, known.tries)
            return
        self._unrecorded[task_id] = (
            _Unrecorded(reason, now)
            if known is None
            else _Unrecorded(reason, known.since, known.tries + 1)
        )
        log.warning(
            "could not record the failure of %s (%s); retrying every %g s, quietly: the log "
            "says when a write goes through",
            task_id,
            reason,
            STORE_RETRY_S,
        )

    def _store_took(self, task_id: str, outcome: str) -> None:
        """A task whose failure the store refused got its writes through since: one line."""
        known = self._unrecorded.pop(task_id, None)
        if known is not None:
            log.info(
                "the database takes writes again: %s %s (after %d refused tries over %.0f s)",
                task_id,
                outcome,
                known.tries,
                time.monotonic() - known.since,
            )

    async def _next_task(self, model: str) -> Any:
        """A resumed running task first (it was started before), else the oldest queued; one
        that no other lane has claimed. The claim is taken before any await."""
        while True:
            limit = len(self._claimed) + 1
            ids = await self.tasks.next_runnable(model, limit)
            free = [task_id for task_id in ids if task_id not in self._claimed]
            if free:
                break
            if len(ids) < limit:
                return None
            # Other lanes claimed these while this one awaited the query (lanes start
            # together after a restart, with nothing new to wake them later): look further.
        self._claimed.add(free[0])
        try:
            return await self.tasks.get(free[0])
        except BaseException:
            self._claimed.discard(free[0])
            raise

    async def _run(self, row: Any, lane: str) -> None:
        task_id = row["id"]
        resuming = row["state"] == TaskState.RUNNING
        if resuming and row["kind"] != TaskKind.EMBEDDING and row["input_tokens"]:
            # Resumed after a restart, it waits for its model's load (seconds to minutes) and
            # then for the engine to read its prompt and its earlier tokens again: said as a
            # wait (the window's "waiting", `tasks`' "waiting to resume"), not as its output
            # count standing still as if it generated. The engine's own reports follow.
            self._prompts[task_id] = PromptProgress(row["input_tokens"], 0, 0, waiting=True)
            self._reading.add(task_id)
        try:
            await self._run_loaded(row, lane, resuming)
        finally:
            self._reading.discard(task_id)
            self._prompts.pop(task_id, None)

    async def _run_loaded(self, row: Any, lane: str, resuming: bool) -> None:
        """Load the task's model (unless loaded) and run the task on it."""
        task_id = row["id"]
        remote = self.remote.engine_for(row["model"]) if self.remote else None
        if remote is None:
            path = await self.models.path_for_run(row["model"])
        else:
            path = Path(row["model"])  # an upstream model: nothing to load from disk
        key = lane if remote is not None else row["model"]  # local lanes share one copy
        slot = self._slots.get(key)
        needs_load = (slot is None or slot.model is None) and remote is None
        cancelled = self._load_cancels[task_id] = asyncio.Event()  # before it shows loading
        try:
            if not resuming and needs_load and not await self.tasks.mark_loading(task_id):
                return  # cancelled meanwhile
            slot = await self._loaded_unless_cancelled(
                asyncio.create_task(self._acquire(key, path, remote)), cancelled
            )
        except EngineCrashed as exc:  # the engine process died while loading
            await self._after_crash(row["model"], task_id, None, exc)
            return
        except EngineError as exc:
            await self._fail_or_confirm(task_id, exc.code, exc.message)
            return
        finally:
            del self._load_cancels[task_id]
        if slot is None:  # cancelled while its model loads: confirmed now, not at the end
            await self._confirm_cancelled(task_id)
            return
        loaded = slot.model
        assert loaded is not None  # _acquire takes loaded models only
        try:
            if row["kind"] == TaskKind.EMBEDDING:
                await self._embed(row, loaded)
            else:
                await self._generate(task_id, loaded, resuming)
        finally:
            self._first_tokens.pop(task_id, None)  # its end, if any, has stored it
            keep_alive = json.loads(row["request"]).get("keep_alive_s")
            slot.keep_alive = float(keep_alive) if isinstance(keep_alive, int | float) else None
            self._give_back(slot)  # keep_alive 0 unloads now, not at the next round

    async def _generate(self, task_id: str, loaded: LoadedModel, resuming: bool) -> None:
        row = await self.tasks.get(task_id)
        request_json = json.loads(row["request"])
        snapshot = json.loads(row["snapshot"]) if resuming and row["snapshot"] else {}
        # Tools and output format: prompt notes, tools to offer, the output grammar.
        plan = plan_output(request_json, chat_messages(request_json))
        opens = not plan.parse_calls  # with tools, items open as text or calls come
        if not resuming and await self.tasks.mark_running(task_id, open_message=opens) is None:
            await self._confirm_cancelled(task_id)  # cancelled while loading
            return
        tokens: list[int] = list(snapshot.get("tokens", []))
        # Upstream models continue from text, so their snapshot keeps the text too.
        keep_text = bool(getattr(loaded, "resumes_from_text", False))
        text = [snapshot.get("text", "")] if keep_text else []
        # The seed is fixed before the first token and kept in the snapshot, so a resumed run
        # samples with the same randomness (a function of seed and position).
        seed = snapshot.get("seed", request_json.get("seed"))
        if seed is None:
            seed = secrets.randbits(63)
        request = GenerationRequest(
            messages=plan.messages,
            max_output_tokens=request_json.get("max_output_tokens"),
            temperature=request_json["temperature"],
            top_p=request_json["top_p"],
            top_k=request_json.get("top_k"),
            seed=seed,
            resume_tokens=list(tokens),
            resume_text="".join(text),
            on_restart=row["on_restart"],
            grammar=plan.grammar,
            tools=plan.tools,
            sink_interval=self.commit_interval,
            prompt=request_json.get("prompt"),
            suffix=request_json.get("suffix"),
        )
        state: dict[str, Any] = {"input_tokens": row["input_tokens"], "seed": seed}
        calls = None
        if not opens:
            calls = CallingOutput(
                self.tasks,
                task_id,
                snapshot.get("text", ""),
                max_calls(request_json),
                {t["name"]: t["namespace"] for t in plan.tools or [] if t.get("namespace")},
            )
        # Stop sequences: text that may begin one is held back (and kept in the snapshot).
        stops = StopScanner(request_json.get("stop") or [], snapshot.get("held", ""))
        token_json = SnapshotTokens(tokens)
        stopped = False

        def prompt_only() -> int | None:
            """The prompt's length while no output token came (stored by nothing else)."""
            return None if tokens else (state["input_tokens"] or None)

        def prompt_read(progress: PromptProgress) -> None:
            if task_id in self._reading:  # a late report after the first token: stale
                self._prompts[task_id] = progress
                state["input_tokens"] = progress.total  # the output commits record it

        async def sink(pieces: list[TokenPiece]) -> bool:
            nonlocal stopped
            self._reading.discard(task_id)  # output has begun: the prompt is read
            if pieces and task_id not in self._first_tokens:  # its first (the Speed's start)
                self._first_tokens[task_id] = time.time()
            if stops.stops:
                pieces, deltas, stopped = through_stops(stops, pieces)
            else:
                deltas = [p.text for p in pieces if p.text]
            tokens.extend(p.token_id for p in pieces)
            if stopped:  # persist the text before the stop sequence, then end
                if deltas:
                    await persist(deltas)
                return False
            if not deltas:
                return not request.cancel.is_set()
            return await persist(deltas)

        async def persist(deltas: list[str]) -> bool:
            if calls is not None:
                snap: dict[str, Any] = {"tokens": tokens, "seed": state["seed"]}
                if stops.held:
                    snap["held"] = stops.held
                return await calls.write(
                    deltas,
                    output_tokens=len(tokens),
                    input_tokens=state["input_tokens"],
                    snapshot=snap,
                )
            return await self.tasks.append_deltas(
                task_id,
                deltas,
                output_tokens=len(tokens),
                input_tokens=state["input_tokens"],
                snapshot=snapshot_after(deltas),
                early=True,  # go on while the commit syncs (storage/deltas.py)
            )

        def snapshot_after(deltas: list[str]) -> str:
            """The snapshot that covers the tokens so far, `deltas` the last of their text."""
            rest: dict[str, Any] = {"seed": state["seed"]}
            if stops.held:
                rest["held"] = stops.held
            if keep_text:
                text.extend(deltas)
                rest["text"] = "".join(text)
            return token_json.snapshot(rest)

        ended = False  # the finish committed with the last deltas

        async def last(pieces: list[TokenPiece], result: GenerationResult) -> bool:
            """The generation's end with its last tokens (engines/pump.py): the task's finish
            in the transaction of its last deltas, not a commit of its own (B2). Output
            parsed for tool calls, and stop sequences (text held back, usage cut at the
            stop), end after `generate` as with engines that hand over no end."""
            nonlocal ended
            if calls is not None or stops.stops or result.finish_reason == "cancelled":
                return await sink(pieces)
            tokens.extend(p.token_id for p in pieces)
            deltas = [p.text for p in pieces if p.text]
            ended = await self.tasks.append_deltas(
                task_id,
                deltas,
                output_tokens=len(tokens),
                input_tokens=state["input_tokens"],
                # The finish clears it; should the finish fail, the deltas commit with the
                # snapshot that covers them, so a resume goes on after them, not from token 0.
                snapshot=snapshot_after(deltas),
                finish=finishing(
                    task_id,
                    **finish_values(result),
                    first_token_at=self._first_tokens.get(task_id),
                ),
            )
            return ended

        self._active[task_id] = request
        request.on_prompt = prompt_read
        self._reading.add(task_id)
        try:
            result = await loaded.generate(request, EndingSink(sink, last))
        except EngineCrashed as exc:
            await self._keep_prompt_lengths([task_id])
            await self._after_crash(row["model"], task_id, loaded, exc)
            return
        except EngineError as exc:
            if getattr(exc, "requeue", False) and await requeue_for_retry(self.tasks, task_id):
                return  # an upstream cut the stream: policy `retry` starts the task over
            await self._fail_or_confirm(task_id, exc.code, exc.message, prompt_only())
            return
        finally:
            self._active.pop(task_id, None)
            self._reading.discard(task_id)
            self._prompts.pop(task_id, None)
        if ended:
            return
        if stopped and not request.cancel.is_set():
            # Tokens the engine made after the stop sequence's (in the same hand-over) were
            # never part of the answer: usage counts up to that token.
            result = dataclasses.replace(result, finish_reason="stop", output_tokens=len(tokens))
        elif (
            result.finish_reason != "cancelled"
            and stops.held
            and not await persist([stops.flush()])
        ):
            await self._confirm_cancelled(task_id)  # a cancel won the race
            return
        if result.finish_reason == "cancelled":
            if self._stopping:
                return  # a shutdown, not a cancel: recovery applies the task's policy
            # before any output, its prompt's length is kept (nothing else stored it)
            await self._confirm_cancelled(task_id, prompt_only())
            return
        if calls is not None:
            result = dataclasses.replace(
                result, finish_reason=calls.finish_reason(result.finish_reason)
            )
        if calls is not None and not await calls.close(
            result.finish_reason,
            output_tokens=result.output_tokens,
            input_tokens=result.input_tokens,
        ):
            await self._confirm_cancelled(task_id)  # a cancel won the race
            return
        done = await self.tasks.finish(
            task_id,
            **finish_values(result),
            stop_sequence=stops.matched if stopped else None,
            first_token_at=self._first_tokens.get(task_id),
        )
        if not done:
            # A cancel won the race in the store: never both completed and cancelled.
            await self._confirm_cancelled(task_id)

    async def _embed(self, row: Any, loaded: LoadedModel) -> None:
        """An embedding task: one call to the model, its vectors stored with its completion
        (storage/embeddings.py). No token events; a cancel stops it between decodes."""
        task_id = row["id"]
        # A task left running by a restart (policy resume) starts over: nothing is partial.
        started = row["state"] == TaskState.RUNNING
        if not started and await self.tasks.mark_running(task_id, open_message=False) is None:
            await self._confirm_cancelled(task_id)  # cancelled while queued or loading
            return
        if not isinstance(loaded, Embeds):
            await self._fail_or_confirm(
                task_id,
                "embeddings_unsupported",
                f"{row['model']} runs on an upstream server; embeddings are computed by local "
                "models only.",
            )
            return
        request = EmbeddingRequest(json.loads(row["request"])["input"])
        self._active[task_id] = request
        try:
            result = await loaded.embed(request)
        except EngineCrashed as exc:
            await self._after_crash(row["model"], task_id, loaded, exc)
            return
        except EngineError as exc:
            if exc.code == "cancelled" or request.cancel.is_set():
                if not self._stopping:
                    await self._confirm_cancelled(task_id)
                return
            await self._fail_or_confirm(task_id, exc.code, exc.message)
            return
        finally:
            self._active.pop(task_id, None)
        if not await finish_embedding(self.tasks, task_id, result):
            await self._confirm_cancelled(task_id)  # a cancel won the race

    async def _after_crash(
        self, model_id: str, task_id: str, loaded: LoadedModel | None, crash: EngineCrashed
    ) -> None:
        """A model's engine process died under this task: drop that model (the next task
        loads it afresh, unless it crashed too often) and give the task, and the model's
        queued ones, their restart policies, by the same table and the same code as a
        restart of the service. Each lane reports its own task; the first report of a crash
        also handles the queue."""
        if self._stopping:
            return  # the service is going down anyway: recovery at the next start does it
        record, new = self.crashes.record(model_id, crash)
        affected = [task_id]
        if new:
            # Its slot, whichever task reports the crash first (one that was about to take the
            # model reports it too, with no model of its own: _acquire).
            slot = self._slots.get(model_id)
            dead = None if slot is None else slot.model
            if dead is not None and (dead is loaded or _crash_of(dead) is crash):
                del self._slots[model_id]
                await dead.unload()  # the process is gone: this only reaps what is left
            # The model's queued tasks too (a `fail` one fails), as a restart would
            # (LMSP_API.md: "exactly as after a restart of the service").
            affected += [
                row["id"]
                for row in await self.tasks.unfinished([TaskState.QUEUED])
                if row["model"] == model_id and row["kind"] in RUNNER_KINDS
            ]
        first = self._first_tokens.get(task_id)  # its run's, stored if the crash ends it
        items = await recover_after_crash(
            self.tasks,
            affected,
            crash.code,
            crash.message,
            {} if first is None else {task_id: first},
        )
        record.count(items)
        self._notify_load(model_id, self.loaded_state(model_id), 0.0)

    def _died_idle(self, lane: str, loaded: LoadedModel, crash: EngineCrashed) -> None:
        """A loaded model's engine process died. With a task on it, that task's run reports
        the crash (_after_crash). With none (the out-of-memory killer picks the biggest idle
        process), nothing would until the next request failed on the dead process: the model
        is dropped now, shows unloaded, and the next request loads it again. The crash is
        recorded (the Models page and /v1/models show it) but does not count towards the
        hold (CrashLog.record): no task can have caused it, nor can it come back by itself."""
        slot = self._slots.get(lane)
        if self._stopping or slot is None or slot.model is not loaded or slot.busy:
            return
        model_id = _model_of(lane)
        del self._slots[lane]
        if isinstance(loaded, CachesPrefixes):
            self._unloaded_prefix_stats.add(loaded.prefix_stats)
        self.crashes.record(model_id, crash, idle=True)
        log.warning("%s was idle: it is unloaded, and the next request loads it again", model_id)
        reaping = asyncio.create_task(loaded.unload())  # the process is gone: this only reaps
        self._unloads.add(reaping)
        reaping.add_done_callback(self._unloads.discard)
        self._notify_load(model_id, self.loaded_state(model_id), 0.0)

    def engine_pid(self, model_id: str) -> int | None:
        """The process id of the engine worker running a loaded local model."""
        slot = self._slots.get(model_id)
        pid = getattr(slot.model, "pid", None) if slot is not None else None
        return pid if isinstance(pid, int) else None

    def last_crash(self, model_id: str) -> CrashRecord | None:
        """The model's most recent engine crash since the service started, if any."""
        return self.crashes.last(model_id)

    async def load_again(self, model_id: str, keep_alive: float | None = None) -> None:
        """The user loads a model (after a crash, or ahead of its requests: `models load`,
        POST /v1/models/{id}/load, Ollama's request without a prompt): it is no longer held
        back, it loads, and its queued tasks run. `keep_alive`: idle seconds before it is
        unloaded (negative: never; None: the idle timeout). An upstream's model has nothing
        to load here."""
        if self.remote is not None and self.remote.engine_for(model_id) is not None:
            return
        self.crashes.release(model_id)
        path = await self.models.path_for_run(model_id)
        slot = await self._acquire(model_id, path)
        slot.keep_alive = keep_alive
        slot.unload_when_idle = False
        self._give_back(slot)
        self._wake(model_id)

    async def unload(self, model_id: str) -> bool:
        """The user unloads a model (`models unload`, POST /v1/models/{id}/unload, Ollama's
        keep_alive 0): now when no task runs on it, else as soon as its running tasks end
        (they are not cut short; a task queued later loads it again). True when it is
        unloaded now."""
        for lane, slot in list(self._slots.items()):
            if _model_of(lane) != model_id:
                continue
            if slot.model is None:  # loading: unloaded once loaded
                with contextlib.suppress(Exception):
                    await asyncio.shield(slot.loading)
            if self._slots.get(lane) is not slot:
                continue  # its load failed, or something else unloaded it meanwhile
            if slot.busy == 0:
                await self._unload(lane)
            else:
                slot.unload_when_idle = True
        return self.loaded_state(model_id) == "unloaded"

    async def _fail_or_confirm(
        self, task_id: str, code: str, message: str, input_tokens: int | None = None
    ) -> None:
        """Fail the task, or confirm its cancel if one won the race. `input_tokens`: the
        prompt's length of a generation that ends before its output (stored with the end);
        its run's first token time, if it had one, is stored with the end too."""
        first = self._first_tokens.get(task_id)
        if not await self.tasks.fail(
            task_id, code, message, input_tokens=input_tokens, first_token_at=first
        ):
            await self._confirm_cancelled(task_id, input_tokens)

    async def _confirm_cancelled(self, task_id: str, input_tokens: int | None = None) -> bool:
        """TaskStore.confirm_cancelled with its run's first token time, if it had one, and
        `input_tokens` as for _fail_or_confirm."""
        first = self._first_tokens.get(task_id)
        return await self.tasks.confirm_cancelled(
            task_id, input_tokens=input_tokens, first_token_at=first
        )

    async def _keep_prompt_lengths(self, task_ids: Iterable[str]) -> None:
        """Record the prompt length of these generations still reading their prompts (only
        output commits store it): before a stop or after an engine crash, whose restart
        policy ends or restarts them mid-read, so the task object and usage still say it."""
        moves = [
            prompt_length_kept(task_id, self._prompts[task_id].total)
            for task_id in task_ids
            if task_id in self._reading and task_id in self._prompts
        ]
        try:
            await asyncio.gather(*(self.tasks.transition(move) for move in moves))
        except LmspError as exc:  # the disk is full: the stop or the crash goes on all the same
            log.warning("could not record the prompt lengths of %s: %s", task_ids, exc.message)

    # -- loading -----------------------------------------------------------------------
    async def _loaded_unless_cancelled(
        self, acquiring: asyncio.Task[_Slot], cancelled: asyncio.Event
    ) -> _Slot | None:
        """The model's slot, taken for the task (_acquire), or None once the task is cancelled
        while it loads: the load goes on without it (single-flight: the model's next task,
        or another lane, takes it), and gives back what it took when it ends."""
        cancel = asyncio.create_task(cancelled.wait())
        try:
            await asyncio.wait((acquiring, cancel), return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            acquiring.cancel()  # the lane stops (the runner's stop): so does its load
            acquiring.add_done_callback(self._give_back_left)  # it may have just taken it
            raise
        finally:
            cancel.cancel()
        if not acquiring.done():
            self._loads_left.add(acquiring)
            acquiring.add_done_callback(self._load_left_done)
            return None
        return acquiring.result()

    def _load_left_done(self, task: asyncio.Task[_Slot]) -> None:
        self._loads_left.discard(task)
        if not task.cancelled() and task.exception() is not None:
            # The model's next task loads it again and reports its failure.
            log.info("a load whose task was cancelled failed: %s", task.exception())
        self._give_back_left(task)

    def _give_back_left(self, task: asyncio.Task[_Slot]) -> None:
        """A load no task waits for any more: the model stays for its idle time."""
        if not task.cancelled() and task.exception() is None:
            self._give_back(task.result())

    def _give_back(self, slot: _Slot) -> None:
        """A task is done with its model (taken by _acquire): it is idle once none runs on it
        (the idle unloader, _make_room and _died_idle look at `busy`)."""
        slot.busy -= 1
        slot.last_used = time.monotonic()
        self._idle_changed.set()
        crash = None if slot.busy or slot.model is None else _crash_of(slot.model)
        if crash is not None and slot.model is not None:
            # It died while taken, and no task reported it (a load whose task was cancelled
            # held it, or the task had ended): now idle, it is dropped as _died_idle does.
            lane = next((lane for lane, s in self._slots.items() if s is slot), None)
            if lane is not None:
                self._died_idle(lane, slot.model, crash)

    async def _acquire(self, lane: str, path: Path, remote: Engine | None = None) -> _Slot:
        """The slot of `lane`'s loaded model (a model id for local models, whose lanes share
        it), loaded once however many tasks ask at the same time, and taken for the caller:
        `busy` counts it, and _give_back returns it. Never a model whose engine process is
        gone: one that died after its load and before the take (_died_idle dropped it) is
        loaded again; the check and the take have no await between them, so a death after
        that is a crash during the task (_after_crash). A model that died under another
        task, not yet reported, fails this one with the crash, as it does the queued ones."""
        died = 0
        while True:
            slot = self._slots.get(lane)
            if slot is None:
                slot = await self._load(lane, path, remote)
            loaded = await asyncio.shield(slot.loading)
            crash = _crash_of(loaded)
            if self._slots.get(lane) is slot and crash is None:
                slot.busy += 1
                slot.last_used = time.monotonic()
                return slot
            if crash is None:
                continue  # unloaded before it was taken (the user, or to make room)
            if self._slots.get(lane) is slot:
                raise crash  # a task on it will report it too (CrashLog counts it once)
            died += 1
            if died == 2:  # every load dies at once: a crash while loading, which counts
                raise EngineCrashed(_model_of(lane), crash.cause)

    async def _load(self, lane: str, path: Path, remote: Engine | None) -> _Slot:
        """Register a slot for `lane` and start its model's load (single-flight: other tasks
        wait on `slot.loading`); the slot is loaded when this returns."""
        model_id = _model_of(lane)
        if remote is None and model_id in self.crashes.held:
            raise self.crashes.held_error(model_id)
        if remote is None:
            await self._make_room()
        slot = _Slot(asyncio.get_running_loop().create_future(), remote=remote is not None)
        self._slots[lane] = slot
        self._notify_load(model_id, "loading", 0.0)
        try:
            # A local model runs with its settings fitted to the memory available.
            settings = None
            if remote is None and self.settings_of is not None:
                settings = await self.settings_of(model_id)
                if settings.parallel and settings.parallel != self.lanes_of(model_id):
                    self.model_parallel[model_id] = settings.parallel
                    self._wake(model_id)  # lanes for the model's own concurrency
            loaded = await (remote or self.engine).load(
                path,
                lambda p: self._notify_load(model_id, "loading", p),
                settings=settings,
            )
        except BaseException as exc:
            del self._slots[lane]
            slot.loading.set_exception(exc)
            slot.loading.exception()  # mark retrieved: other waiters may not exist
            self._notify_load(model_id, "unloaded", 0.0)
            raise
        slot.model = loaded
        slot.loading.set_result(loaded)
        self._notify_load(model_id, "loaded", 1.0)
        log.info("%s loaded%s", lane.replace("\x00", " lane "), " (upstream)" if remote else "")
        if isinstance(loaded, ReportsCrashes):
            loaded.when_crashed(partial(self._died_idle, lane, loaded))
        return slot

    async def _make_room(self) -> None:
        """Unload the least recently used idle model when the maximum is loaded."""
        while sum(not s.remote for s in self._slots.values()) >= self.max_loaded_models:
            idle = [
                (s.last_used, m)
                for m, s in self._slots.items()
                if s.model is not None and s.busy == 0 and not s.remote
            ]
            if not idle:
                return  # everything is busy; load anyway rather than deadlock
            await self._unload(min(idle)[1])

    def prefix_cache_stats(self) -> PrefixStats:
        """Prompt-prefix cache figures of every model loaded since the runner started."""
        total = PrefixStats()
        total.add(self._unloaded_prefix_stats)
        for slot in self._slots.values():
            if isinstance(slot.model, CachesPrefixes):
                total.add(slot.model.prefix_stats)
        return total

    async def _unload(self, lane: str) -> None:
        slot = self._slots.pop(lane, None)
        if slot is not None and isinstance(slot.model, CachesPrefixes):
            self._unloaded_prefix_stats.add(slot.model.prefix_stats)
        if slot is not None and slot.model is not None:
            unloading = asyncio.create_task(slot.model.unload())
            self._unloads.add(unloading)
            unloading.add_done_callback(self._unloads.discard)
            await asyncio.shield(unloading)  # a cancelled caller leaves it to finish (stop waits)
            log.info("%s unloaded", lane.replace("\x00", " lane "))
            self._notify_load(_model_of(lane), self.loaded_state(_model_of(lane)), 0.0)

    async def _unload_idle_forever(self) -> None:
        while True:
            limits = [self._idle_limit(s) for s in self._slots.values()] + [self.idle_unload_s]
            # asyncio.wait, not wait_for: on 3.11 wait_for can swallow the cancel that stop()
            # sends when the event is set at the same moment, and stop() would wait forever.
            changed = asyncio.ensure_future(self._idle_changed.wait())
            try:
                await asyncio.wait({changed}, timeout=min(30.0, max(min(limits) / 4, 0.05)))
            finally:
                changed.cancel()
            self._idle_changed.clear()
            now = time.monotonic()
            for lane, slot in list(self._slots.items()):
                idle = now - slot.last_used
                if (
                    slot.model
                    and slot.busy == 0
                    and (slot.unload_when_idle or idle >= self._idle_limit(slot))
                ):
                    await self._unload(lane)

    def _notify_load(self, model_id: str, state: str, progress: float) -> None:
        notify(self.load_listeners, model_id, state, progress)
