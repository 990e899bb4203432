"""The crash loop (`make torture`): a real `serve` under mixed load, SIGKILLed at random
moments and restarted, with chapter 11's promises checked on disk after every kill.

After each kill, before the restart, the SQLite file is read directly (read-only): every task
acknowledged to a client exists, sequence numbers are gapless and unique, each task's state
is the one its last event implies, and `PRAGMA integrity_check` is ok. After the restart the
same checks run again, and every task left unfinished must have got the outcome of table 11.3
for its policy and pre-crash state, as `GET /v1/recovery/last` reports and the event log
shows; idempotent retries must replay the task they created before the kill.

    python -m bench.torture --kills 500 [--seed N] [--workdir DIR] [--fuzz-examples N]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import random
import shutil
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from tests.integration.serve_process import ServeProcess, create_token
from tests.support.dbcheck import (
    Snapshot,
    invariant_violations,
    recovery_violations,
    take_snapshot,
)

MODEL = "smollm2-135m-instruct"
POLICIES = ("fail", "retry", "resume")
PROMPTS = (
    "Say hello.",
    "Name a colour.",
    "Count to three.",
    "Write one word about the sea.",
    "What is two plus two?",
)
# Until a kill has caught a task in each of these states, every other kill waits for one.
WANTED_STATES = ("running", "queued")
# The connection drops when the process is killed: these are expected, not violations.
TRANSPORT_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError, ConnectionError, OSError)


@dataclass
class Figures:
    """What a crash loop did and found."""

    kills: int = 0
    acknowledged: set[str] = field(default_factory=set)
    requests: int = 0
    cancels: int = 0
    replays_checked: int = 0
    leftovers: collections.Counter[tuple[str, str]] = field(default_factory=collections.Counter)
    violations: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0

    def summary(self) -> str:
        left = sum(self.leftovers.values())
        states = collections.Counter(state for state, _ in self.leftovers.elements())
        cells = len(self.leftovers)
        return (
            f"torture: kills={self.kills} tasks={len(self.acknowledged)} "
            f"requests={self.requests} cancels={self.cancels} "
            f"idempotent_replays={self.replays_checked} recoveries={left} "
            f"({', '.join(f'{s} {n}' for s, n in sorted(states.items()))}; "
            f"{cells}/12 cells of table 11.3) "
            f"violations={len(self.violations)} elapsed={self.elapsed_s:.0f}s"
        )


@dataclass
class KeyRecord:
    """An Idempotency-Key the load sent: its body and the task id its answers carried."""

    body: dict[str, Any]
    task_id: str | None = None


class CrashLoop:
    """Drives one data directory through `kills` SIGKILL/restart cycles."""

    def __init__(
        self, workdir: Path, *, seed: int = 0, max_backlog: int = 12, verbose: bool = False
    ) -> None:
        self.workdir = workdir
        self.data_dir = workdir / "data"
        self.db_path = self.data_dir / "lmsp.db"
        self.rng = random.Random(seed)
        self.max_backlog = max_backlog
        self.verbose = verbose
        self.figures = Figures()
        self.keys: dict[str, KeyRecord] = {}
        self.caught_states: set[str] = set()  # the states tasks were in at some kill
        self.server = ServeProcess(self.data_dir)
        self.token = ""
        self._session: aiohttp.ClientSession | None = None
        self._url = ""

    # -- the loop --------------------------------------------------------------------------
    async def run(self, kills: int) -> Figures:
        started = time.monotonic()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.token = await asyncio.to_thread(create_token, self.data_dir, "admin")
        before: Snapshot | None = None
        try:
            for cycle in range(kills):
                self._url = await asyncio.to_thread(self.server.start)
                async with aiohttp.ClientSession(
                    base_url=self._url,
                    headers={"Authorization": f"Bearer {self.token}"},
                    timeout=aiohttp.ClientTimeout(total=30),
                ) as session:
                    self._session = session
                    if before is not None:
                        await self._check_restart(before)
                    await self._load_then_kill(before)
                self.figures.kills += 1
                before = await asyncio.to_thread(take_snapshot, self.db_path)
                self.caught_states |= {t.state for t in before.unfinished().values()}
                self._check_on_disk(before, "after kill")
                if self.verbose and (cycle + 1) % 10 == 0:
                    self.figures.elapsed_s = time.monotonic() - started
                    print(self.figures.summary(), flush=True)
            # One last start: the final kill's leftovers must be recovered too.
            self._url = await asyncio.to_thread(self.server.start)
            async with aiohttp.ClientSession(
                base_url=self._url,
                headers={"Authorization": f"Bearer {self.token}"},
                timeout=aiohttp.ClientTimeout(total=30),
            ) as session:
                self._session = session
                if before is not None:
                    await self._check_restart(before)
            code = await asyncio.to_thread(self.server.terminate)
            if code != 0:
                self._violation(f"serve exited {code} on SIGTERM")
        except AssertionError as exc:  # serve did not start: a finding, not a crash of the loop
            self._violation(f"serve did not start: {str(exc)[-1500:]}")
        finally:
            if self.server.proc is not None and self.server.proc.poll() is None:
                self.server.kill()
        self.figures.elapsed_s = time.monotonic() - started
        return self.figures

    def _violation(self, text: str) -> None:
        self.figures.violations.append(f"[kill {self.figures.kills}] {text}")
        if self.verbose:
            print("VIOLATION", self.figures.violations[-1], flush=True)

    # -- checks ----------------------------------------------------------------------------
    def _check_on_disk(self, snap: Snapshot, when: str) -> None:
        for problem in invariant_violations(snap):
            self._violation(f"{when}: {problem}")
        missing = self.figures.acknowledged - set(snap.tasks)
        for task_id in sorted(missing)[:5]:
            self._violation(f"{when}: acknowledged task {task_id} is not in the database")
        for key, record in self.keys.items():
            if record.task_id is None:
                continue
            stored = [v for (_, k), v in snap.keys.items() if k == key]
            if record.task_id in snap.tasks and stored and stored[0][1] != record.task_id:
                self._violation(
                    f"{when}: key {key} answered {record.task_id}, stored for {stored[0][1]}"
                )

    async def _check_restart(self, before: Snapshot) -> None:
        assert self._session is not None
        async with self._session.get("/v1/recovery/last") as r:
            report = await r.json() if r.status == 200 else None
            if r.status not in (200, 404):
                self._violation(f"GET /v1/recovery/last answered {r.status}")
        for state_policy in ((t.state, t.on_restart) for t in before.unfinished().values()):
            self.figures.leftovers[state_policy] += 1
        after = await asyncio.to_thread(take_snapshot, self.db_path)
        self._check_on_disk(after, "after restart")
        for problem in recovery_violations(before, report, after):
            self._violation(f"recovery: {problem}")
        await self._replay_keys(before)

    async def _replay_keys(self, before: Snapshot) -> None:
        """Retry a sample of the background requests whose key was committed before the kill:
        each must replay (Idempotent-Replayed) the very task it created."""
        done = {k: task for (_, k), (state, task) in before.keys.items() if state == "done"}
        sample = [k for k in done if k in self.keys and self.keys[k].body.get("background")]
        self.rng.shuffle(sample)
        for key in sample[:4]:
            status, answer, headers = await self._post(self.keys[key].body, key)
            if status is None:
                continue
            self.figures.replays_checked += 1
            if status != 202 or headers.get("Idempotent-Replayed") != "true":
                self._violation(f"retry of key {key} after restart: {status} {answer}")
            elif answer.get("id") != done[key]:
                self._violation(
                    f"retry of key {key} replayed {answer.get('id')}, stored task {done[key]}"
                )

    # -- load ------------------------------------------------------------------------------
    async def _load_then_kill(self, before: Snapshot | None) -> None:
        backlog = len(before.unfinished()) if before is not None else 0
        crowded = backlog > self.max_backlog
        if self.rng.random() < 0.2:
            # A drain cycle: cancel whatever waits or runs, so that fresh tasks of every
            # policy (`fail` first) reach loading and running before the kill. Without it
            # the requeued retry/resume backlog keeps `fail` tasks queued until they fail.
            await self._guard(self._drain())
            crowded = False
        creates = self.rng.randint(0, 2) if crowded else self.rng.randint(3, 10)
        actions = [self._background() for _ in range(creates)]
        actions += [self._stream() for _ in range(self.rng.randint(0, 2))]
        actions += [self._sync() for _ in range(self.rng.randint(0, 1))]
        actions += [self._cancel_some() for _ in range(self.rng.randint(0, 2) + 3 * crowded)]
        actions += [self._retry_known_key() for _ in range(self.rng.randint(0, 2))]
        running = [asyncio.create_task(self._guard(a)) for a in actions]
        # Kills land early (model loading, recovery's requeues starting), in the middle
        # (tasks queued, running, finishing), as soon as a task is seen in a state no kill
        # has caught yet (queued, running: waited for, not timed, so that a slow machine
        # catches them too), or right after a cancel of a running task (to catch
        # `cancelling`, which lasts about one token).
        mode = self.rng.random()
        uncaught = [s for s in WANTED_STATES if s not in self.caught_states]
        if uncaught and self.figures.kills % 2:
            await self._until_seen(uncaught[0])
            await asyncio.sleep(self.rng.uniform(0, 0.01))
        elif mode < 0.25:
            await asyncio.sleep(self.rng.uniform(0, 0.25))
        elif mode < 0.75:
            await asyncio.sleep(self.rng.uniform(0.25, 2.5))
        else:
            await asyncio.sleep(self.rng.uniform(0.3, 1.5))
            await self._guard(self._cancel_running())
            await asyncio.sleep(self.rng.uniform(0, 0.02))
        await asyncio.to_thread(self.server.kill)
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)

    async def _until_seen(self, state: str, limit: float = 120.0) -> None:
        """Return once the service lists a task in `state` (or after `limit`: kill anyway)."""
        assert self._session is not None
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            try:
                params = {"state": state, "limit": "1"}
                async with self._session.get("/v1/tasks", params=params) as r:
                    if r.status == 200 and (await r.json()).get("data"):
                        return
            except TRANSPORT_ERRORS:
                pass
            await asyncio.sleep(0.005)

    async def _drain(self) -> None:
        assert self._session is not None
        params = {"state": "queued,loading,running", "limit": "100"}
        async with self._session.get("/v1/tasks", params=params) as r:
            found = (await r.json()).get("data", []) if r.status == 200 else []
        for task in found:
            self.figures.cancels += 1
            async with self._session.post(f"/v1/responses/{task['id']}/cancel") as r:
                if r.status not in (200, 409):
                    self._violation(f"cancel answered {r.status}: {await r.text()}")
        await self._guard(self._background(policy="fail"))

    async def _cancel_running(self) -> None:
        assert self._session is not None
        async with self._session.get("/v1/tasks", params={"state": "running,loading"}) as r:
            found = (await r.json()).get("data", []) if r.status == 200 else []
        if found:
            self.figures.cancels += 1
            async with self._session.post(f"/v1/responses/{found[0]['id']}/cancel") as r:
                if r.status not in (200, 409):
                    self._violation(f"cancel answered {r.status}: {await r.text()}")

    async def _guard(self, action: Any) -> None:
        try:
            await action
        except TRANSPORT_ERRORS:
            pass

    def _body(self, **extra: Any) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": MODEL,
            "input": self.rng.choice(PROMPTS),
            "max_output_tokens": self.rng.randint(1, 10),
            "on_restart": self.rng.choice(POLICIES),
        }
        if self.rng.random() < 0.5:
            body["temperature"] = 0
        else:
            body["seed"] = self.rng.randint(0, 2**31)
        body.update(extra)
        return body

    async def _post(
        self, body: dict[str, Any], key: str | None = None
    ) -> tuple[int | None, dict[str, Any], dict[str, str]]:
        assert self._session is not None
        headers = {"Idempotency-Key": key} if key else {}
        self.figures.requests += 1
        async with self._session.post("/v1/responses", json=body, headers=headers) as r:
            answer = await r.json()
            if r.status >= 500 and r.status != 503:
                self._violation(f"POST /v1/responses {body} answered {r.status}: {answer}")
            return r.status, answer, dict(r.headers)

    def _acknowledge(self, task_id: str, key: str | None) -> None:
        self.figures.acknowledged.add(task_id)
        if key is None:
            return
        record = self.keys[key]
        if record.task_id is None:
            record.task_id = task_id
        elif record.task_id != task_id:
            self._violation(f"key {key} answered both {record.task_id} and {task_id}")

    async def _background(self, policy: str | None = None) -> None:
        key = str(uuid.uuid4()) if self.rng.random() < 0.5 else None
        body = self._body(background=True)
        if policy is not None:
            body["on_restart"] = policy
        if key:
            self.keys[key] = KeyRecord(body)
        status, answer, _ = await self._post(body, key)
        if status == 202:
            self._acknowledge(answer["id"], key)
        elif status is not None:
            self._violation(f"background create answered {status}: {answer}")

    async def _retry_known_key(self) -> None:
        known = [k for k, r in self.keys.items() if r.body.get("background")]
        if not known:
            return
        key = self.rng.choice(known)
        status, answer, _ = await self._post(self.keys[key].body, key)
        if status == 202:
            self._acknowledge(answer["id"], key)
        else:
            self._violation(f"retry of background key {key} answered {status}: {answer}")

    async def _sync(self) -> None:
        key = str(uuid.uuid4()) if self.rng.random() < 0.5 else None
        body = self._body()
        if key:
            self.keys[key] = KeyRecord(body)
        status, answer, _ = await self._post(body, key)
        if status == 200:
            self._acknowledge(answer["id"], key)
        elif status not in (None, 503):
            self._violation(f"sync create answered {status}: {answer}")

    async def _stream(self) -> None:
        """A stream (sometimes background too); the task counts as acknowledged once its
        response.created event arrived. Some clients leave early (which cancels a stream)."""
        assert self._session is not None
        body = self._body(stream=True, background=self.rng.random() < 0.3)
        leave_after = self.rng.choice([1, 3, 10_000])
        self.figures.requests += 1
        async with self._session.post("/v1/responses", json=body) as r:
            if r.status != 200:
                self._violation(f"stream create answered {r.status}: {await r.text()}")
                return
            seen = 0
            async for line in r.content:
                if not line.startswith(b"data: "):
                    continue
                event = json.loads(line[6:])
                if event["type"] == "response.created":
                    self.figures.acknowledged.add(event["response"]["id"])
                seen += 1
                if seen >= leave_after:
                    return

    async def _cancel_some(self) -> None:
        assert self._session is not None
        if not self.figures.acknowledged:
            return
        await asyncio.sleep(self.rng.uniform(0, 0.8))
        task_id = self.rng.choice(sorted(self.figures.acknowledged))
        self.figures.cancels += 1
        async with self._session.post(f"/v1/responses/{task_id}/cancel") as r:
            if r.status not in (200, 409):
                self._violation(f"cancel {task_id} answered {r.status}: {await r.text()}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.torture",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--kills", type=int, default=500, help="SIGKILLs (default 500)")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: random)")
    parser.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="where the data directory goes (default: a temporary folder, "
        "kept if a violation was found)",
    )
    parser.add_argument(
        "--fuzz-examples",
        type=int,
        default=0,
        help="afterwards, run schemathesis with this many examples per "
        "operation against a fresh serve (default 0: skip)",
    )
    parser.add_argument(
        "--all-checks",
        action="store_true",
        help="fuzz with every schemathesis check, the held-back ones too",
    )
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="lmsp-torture-"))
    print(f"torture: seed={seed} workdir={workdir}", flush=True)
    loop = CrashLoop(workdir, seed=seed, verbose=True)
    figures = asyncio.run(loop.run(args.kills))
    for violation in figures.violations[:50]:
        print("VIOLATION", violation)
    print(figures.summary(), flush=True)
    failed = bool(figures.violations)
    if args.fuzz_examples:
        from tests.support.fuzz import run_schemathesis

        # Two documentation checks were held back until the service's owner fixed them (now
        # done: tests/integration/test_fuzz_openapi.py runs them); --all-checks runs them too.
        exclude = () if args.all_checks else ("positive_data_acceptance", "unsupported_method")
        fuzz = run_schemathesis(workdir / "fuzz", args.fuzz_examples, exclude=exclude)
        print(fuzz.summary(), flush=True)
        failed = failed or not fuzz.ok
    if not failed and args.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
