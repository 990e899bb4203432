"""Runs download tasks: each in a worker thread (fetch.py), its progress committed as
coalesced `download.progress` events, cancelled through the one cancel transition, and
picked up again after a restart (recovery has applied its policy by then).

A worker thread rather than a process: the work is network and disk I/O that releases the
GIL, the event loop only reads an integer from it a few times a second, and a stop is a
flag the thread checks between chunks (one network read), so a cancel takes effect within
a fraction of a second without killing anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from lmsp_desktop.core.downloads.fetch import (
    Stopped,
    Transfer,
    fetch,
    kept_partial,
    remove_partial,
)
from lmsp_desktop.core.downloads.hub import HubFile, transient, what_happened
from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.states import TaskKind, TaskState
from lmsp_desktop.core.storage.downloads import record_progress
from lmsp_desktop.core.storage.tasks import TaskStore
from lmsp_desktop.core.views import TaskChange, time_of_day

log = logging.getLogger(__name__)
PROGRESS_EVERY_S = 0.5  # at most two progress events a second per download
SPEED_WINDOW_S = 5.0  # speed is measured over the last few seconds
MAX_PARALLEL = 2  # downloads at once; more wait queued
# While the hub cannot be reached (an app started before the network is up, Wi-Fi lost, the
# hub down): tries again after 2, 4, 8 … seconds, at most a minute apart, for up to ten
# minutes of waiting in all. huggingface_hub's http_backoff (1 s doubling to 8 s, five
# retries) and Ollama's pull (a part's six tries, 1 s doubling to 32 s) both give up within
# about a minute: fine for a command a person watches, too short for a download resumed at
# launch that nobody watches, where a laptop may take minutes to join a network.
RETRY_FIRST_S = 2.0
RETRY_MOST_S = 60.0
RETRY_FOR_S = 600.0


class Speed:
    """Bytes per second over a sliding window of (time, bytes) samples."""

    def __init__(self) -> None:
        self._samples: deque[tuple[float, int]] = deque()

    def add(self, at: float, done: int) -> float | None:
        self._samples.append((at, done))
        while self._samples and at - self._samples[0][0] > SPEED_WINDOW_S:
            self._samples.popleft()
        first_at, first_done = self._samples[0]
        if at - first_at < 0.2:
            return None
        return (done - first_done) / (at - first_at)


class DownloadManager:
    """Starts queued download tasks, reports their progress, stops them on cancel."""

    def __init__(
        self,
        tasks: TaskStore,
        *,
        token: Callable[[], str | None] = lambda: None,
        # Called with the files a download wrote (snapshot paths), each checked against the
        # hub's digest, before its task completes: the registry takes them as new files and
        # rescans.
        on_complete: Callable[[list[Path]], Awaitable[None]] | None = None,
        progress_every: float = PROGRESS_EVERY_S,
        # The waits while the hub cannot be reached (tests make them short).
        retry_first: float = RETRY_FIRST_S,
        retry_most: float = RETRY_MOST_S,
        retry_for: float = RETRY_FOR_S,
    ) -> None:
        self.tasks = tasks
        self.token = token
        self.on_complete = on_complete
        self.progress_every = progress_every
        self.retry_first = retry_first
        self.retry_most = retry_most
        self.retry_for = retry_for
        self._running: dict[str, asyncio.Task[None]] = {}
        self._transfers: dict[str, Transfer] = {}
        self._slots = asyncio.Semaphore(MAX_PARALLEL)
        self._stopping = False
        # A token the caller of one pull lent for that download only (`models pull` with
        # HF_TOKEN set, against a service started without it): in memory, never stored, logged
        # or answered, forgotten when the download ends. A restart loses it (said in the
        # gated error the resumed download then meets).
        self._lent: dict[str, str] = {}
        # Who asked to cancel a running download, for the log line of its end.
        self._cancellers: dict[str, str] = {}

    def lend_token(self, task_id: str, token: str) -> None:
        """Use `token` for the hub requests of `task_id` (before its task is committed)."""
        self._lent[task_id] = token

    def forget_token(self, task_id: str) -> None:
        self._lent.pop(task_id, None)

    def cancelling(self, task_id: str, by: str) -> None:
        """Note who is about to cancel `task_id` (called before the cancel transition); kept
        only while that download runs here."""
        if task_id in self._running:
            self._cancellers[task_id] = by

    async def start(self) -> None:
        """Follow new download tasks, and pick up those left queued or running (resumed)."""
        self.tasks.listeners.append(self._on_change)
        waiting = [TaskState.QUEUED, TaskState.RUNNING]
        for row in await self.tasks.unfinished(waiting, [TaskKind.DOWNLOAD]):
            self._spawn(row["id"])

    async def stop(self) -> None:
        """Stop the transfers; their tasks stay as they are, for recovery at the next start,
        and their partial files stay on disk to resume from."""
        self._stopping = True
        with contextlib.suppress(ValueError):
            self.tasks.listeners.remove(self._on_change)
        for transfer in self._transfers.values():
            transfer.stop.set()
        await asyncio.gather(*self._running.values(), return_exceptions=True)

    def _on_change(self, change: TaskChange) -> None:
        if change.kind != TaskKind.DOWNLOAD:
            return
        if change.state == TaskState.QUEUED:
            self._spawn(change.task_id)
        elif change.state == TaskState.CANCELLING and change.task_id in self._transfers:
            self._transfers[change.task_id].stop.set()

    def _spawn(self, task_id: str) -> None:
        if self._stopping or task_id in self._running:
            return
        task = asyncio.create_task(self.run(task_id), name=f"download:{task_id}")
        self._running[task_id] = task
        task.add_done_callback(lambda _: self._running.pop(task_id, None))

    async def run(self, task_id: str) -> None:
        """Run one download task to its end (or until a stop); started by the listener, or
        directly by `models pull` when no service runs."""
        async with self._slots:
            if self._stopping:
                return
            transfer = self._transfers[task_id] = Transfer()
            try:
                await self._download(task_id, transfer)
            except Exception:
                log.exception("download %s failed unexpectedly", task_id)
                await self.tasks.fail(task_id, "internal_error", "Internal error; see the log.")
            finally:
                self._transfers.pop(task_id, None)
                self._lent.pop(task_id, None)
                self._cancellers.pop(task_id, None)

    async def _download(self, task_id: str, transfer: Transfer) -> None:
        row = await self.tasks.get(task_id)
        started = row["state"] == TaskState.RUNNING or (
            row["state"] == TaskState.QUEUED
            and await self.tasks.mark_running(task_id, open_message=False) is not None
        )
        if not started:
            if (await self.tasks.get(task_id))["state"] == TaskState.CANCELLED:
                by = self._cancellers.get(task_id)
                log.info(
                    "download %s (%s) cancelled%s before it started",
                    task_id,
                    row["model"],
                    f" by {by}" if by else "",
                )
            return
        request = json.loads(row["request"])
        files = [HubFile(f["name"], f.get("size"), f.get("sha256")) for f in request["files"]]
        total = _total(request)
        token = self._lent.get(task_id) or self.token()
        finished = 0
        paths: list[Path] = []
        try:
            for file in files:
                transfer.file_done = 0
                paths.append(
                    await self._fetch_waiting(task_id, request, file, token, transfer, finished)
                )
                finished += file.size or transfer.file_done
        except Stopped:
            if self._stopping:  # a stop, not a cancel: the policy applies at the next start
                log.info(
                    "download %s (%s) stopped after %s bytes, as its process stops; it "
                    "continues from them when the service next starts",
                    task_id,
                    row["model"],
                    finished + transfer.file_done,
                )
                return
            await self._cancelled(task_id, row["model"], transfer, finished)
            return
        except LmspError as exc:
            if not await self.tasks.fail(task_id, exc.code, exc.message):
                await self._cancelled(task_id, row["model"], transfer, finished)
                return
            # The messages are the service's own sentences: they name files, never a token.
            log.warning(
                "download %s (%s) failed: %s: %s", task_id, row["model"], exc.code, exc.message
            )
            return
        await record_progress(self.tasks, task_id, _progress(files[-1], total, total, None))
        log.info("downloaded %s (%s): %s", task_id, row["model"], ", ".join(map(str, paths)))
        if self.on_complete is not None:
            # Before the task completes: a completed download is a model the registry has
            # listed and checked (`models pull` then says whether it runs, and why not; the
            # Models page has its row when the task table says completed).
            try:
                await self.on_complete(paths)
            except Exception:  # the files are fetched and checked: the download did its part
                log.exception("download %s: listing the files it wrote failed", task_id)
        if not await self.tasks.finish(
            task_id, incomplete_reason=None, input_tokens=0, output_tokens=0
        ):
            await self.tasks.confirm_cancelled(task_id)  # a cancel won the race
            log.info("download %s (%s) cancelled as it completed", task_id, row["model"])

    async def _fetch_waiting(
        self,
        task_id: str,
        request: dict[str, Any],
        file: HubFile,
        token: str | None,
        transfer: Transfer,
        finished: int,
    ) -> Path:
        """Fetch one file; while the hub cannot be reached (no connection, a 5xx, a cut that
        keeps coming back), wait and try again with growing delays, saying so in an event,
        until `retry_for` seconds of waiting are spent. A cancel or a stop ends the wait at
        once. Each try resumes from the bytes on disk."""
        started = time.monotonic()
        waited = 0.0
        tries = 0
        while True:
            tries += 1
            try:
                return await self._fetch_once(task_id, request, file, token, transfer, finished)
            except LmspError as exc:
                delay = min(self.retry_first * 2 ** (tries - 1), self.retry_most)
                if not transient(exc) or waited + delay > self.retry_for:
                    if tries == 1 or not transient(exc):
                        raise
                    raise LmspError(
                        f"{exc.message} Tried {tries} times over "
                        f"{_duration(time.monotonic() - started)}; the bytes already here "
                        "are kept, so pulling again continues from them.",
                        code=exc.code,
                        status=exc.status,
                        type=exc.type,
                    ) from exc
                waited += delay
                await self._wait_to_retry(task_id, request, file, transfer, finished, exc, delay)

    async def _wait_to_retry(
        self,
        task_id: str,
        request: dict[str, Any],
        file: HubFile,
        transfer: Transfer,
        finished: int,
        exc: LmspError,
        delay: float,
    ) -> None:
        """Say (an event, the task's latest progress, the log) that the download waits
        `delay` seconds for the hub and why, then wait; Stopped on a cancel or a stop."""
        partial = await asyncio.to_thread(kept_partial, request["repo"], file)
        if partial is not None:
            transfer.partial = partial  # a cancel during the wait deletes it, as at any time
        transfer.file_done = max(await asyncio.to_thread(_size, partial), transfer.file_done)
        retry_at = round(time.time() + delay, 1)
        progress = {
            **_progress(file, finished + transfer.file_done, _total(request), None),
            "retry_at": retry_at,
            # What happened and what the service does about it: not the failure's advice
            # ("…and try again"), which is the user's to follow only once it gives up.
            "retry_reason": f"{what_happened(exc)} Retrying at {time_of_day(retry_at)}.",
        }
        if not await record_progress(self.tasks, task_id, progress):
            raise Stopped()  # cancelled meanwhile
        log.info(
            "download %s cannot reach the hub (%s: %s); trying again in %.0f s",
            task_id,
            exc.code,
            exc.message,
            delay,
        )
        await _sleep_unless_stopped(transfer, delay)

    async def _fetch_once(
        self,
        task_id: str,
        request: dict[str, Any],
        file: HubFile,
        token: str | None,
        transfer: Transfer,
        finished: int,
    ) -> Path:
        """One try at `file`, its progress committed every `progress_every` seconds (from
        the bytes a wait found on disk, not 0, until the fetch has counted them itself)."""
        speed = Speed()
        job = asyncio.ensure_future(
            asyncio.to_thread(
                fetch,
                request["repo"],
                request["revision"],
                request["commit"],
                file,
                token,
                transfer,
            )
        )
        total = _total(request)
        recorded: int | None = None
        while not job.done():
            await asyncio.wait([job], timeout=self.progress_every)
            done = finished + transfer.file_done
            progress = _progress(file, done, total, speed.add(time.monotonic(), done))
            # An event only when bytes moved: a stalled connection wrote the same row twice a
            # second until its read timed out. A cancel is still seen (the listener sets
            # the stop flag; the thread ends at its next read or its read timeout).
            if job.done() or done == recorded:
                continue
            recorded = done
            if not await record_progress(self.tasks, task_id, progress):
                transfer.stop.set()  # cancelled: the thread ends at its next chunk
        return job.result()

    async def _cancelled(self, task_id: str, model: str, transfer: Transfer, done: int) -> None:
        await asyncio.to_thread(remove_partial, transfer)
        await self.tasks.confirm_cancelled(task_id)
        by = self._cancellers.get(task_id)
        log.info(
            "download %s (%s) cancelled%s after %s bytes; its partial file is deleted",
            task_id,
            model,
            f" by {by}" if by else "",
            done + transfer.file_done,
        )


def _total(request: dict[str, Any]) -> int:
    return int(request.get("bytes_total") or 0)


def _size(path: Path | None) -> int:
    try:
        return path.stat().st_size if path is not None else 0
    except OSError:
        return 0


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min"


def _progress(file: HubFile, done: int, total: int, per_s: float | None) -> dict[str, Any]:
    return {
        "file": file.name,
        "bytes_done": done,
        "bytes_total": total,
        "bytes_per_s": round(per_s) if per_s is not None else None,
    }


async def _sleep_unless_stopped(transfer: Transfer, delay: float) -> None:
    """Wait `delay` seconds on the loop, raising Stopped within a tenth of a second of a
    cancel or a stop. Not a thread blocked in transfer.stop.wait: downloads waiting for a
    hub would hold the default executor's few threads for up to a minute each, and every
    create's tokenizer call (asyncio.to_thread) would queue behind them."""
    end = time.monotonic() + delay
    while not transfer.stop.is_set():
        left = end - time.monotonic()
        if left <= 0:
            return
        await asyncio.sleep(min(0.1, left))
    raise Stopped()
