"""A writer process for the crash test: drives tasks on a real database until it is killed.

It starts as the service does (open, count the boot, recover), prints `ready`, then forever
creates tasks with random restart policies and moves them through their states. After each
commit it prints `ack <task_id> <state> <last_seq>`, so whatever the test read was already
committed when the process was SIGKILLed.

Usage: python -m tests.support.crash_writer DATA_DIR SEED
"""

from __future__ import annotations

import asyncio
import random
import sys
from pathlib import Path

from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.states import UNFINISHED, RestartPolicy, TaskState
from lmsp_desktop.core.storage.recovery import next_boot, recover
from lmsp_desktop.core.storage.store import Store
from tests.support.store_helpers import new_task

S = TaskState


def say(*words: object) -> None:
    sys.stdout.write(" ".join(map(str, words)) + "\n")
    sys.stdout.flush()


async def step(store: Store, rng: random.Random, task_id: str) -> None:
    """One runner-like move for the task, chosen at random among the sensible ones."""
    tasks = store.tasks
    state = S((await tasks.get(task_id))["state"])
    roll = rng.random()
    if state == S.QUEUED:
        if roll < 0.4:
            await tasks.mark_loading(task_id)
        elif roll < 0.85:
            await tasks.mark_running(task_id)
        elif roll < 0.95:
            await tasks.cancel(task_id)
        else:
            await tasks.fail(task_id, "model_load_failed", "no such file")
    elif state == S.LOADING:
        if roll < 0.85:
            await tasks.mark_running(task_id)
        elif roll < 0.95:
            await tasks.cancel(task_id)
        else:
            await tasks.fail(task_id, "model_load_failed", "no such file")
    elif state == S.RUNNING:
        if roll < 0.75:
            n = rng.randint(1, 6)
            row = await tasks.get(task_id)
            tokens = row["output_tokens"] + n
            await tasks.append_deltas(
                task_id,
                [f"t{i} " for i in range(n)],
                output_tokens=tokens,
                input_tokens=5,
                snapshot={"tokens": list(range(tokens))},
            )
        elif roll < 0.85:
            await tasks.cancel(task_id)
        elif roll < 0.95:
            reason = "max_output_tokens" if rng.random() < 0.3 else None
            await tasks.finish(task_id, incomplete_reason=reason, input_tokens=5, output_tokens=9)
        else:
            await tasks.fail(task_id, "engine_error", "boom")
    elif state == S.CANCELLING:
        await tasks.confirm_cancelled(task_id)


async def main(data_dir: Path, seed: int) -> None:
    rng = random.Random(seed)
    store = Store(data_dir)
    await store.open()
    boot = await next_boot(store.tasks)
    await recover(store.tasks, boot)
    say("ready", boot)
    live = [r["id"] for r in await store.tasks.unfinished(sorted(UNFINISHED))]
    while True:
        if not live or rng.random() < 0.25:
            policy = rng.choice(list(RestartPolicy))
            created = await store.tasks.create(new_task(on_restart=policy))
            live.append(created.task_id)
            task_id = created.task_id
        else:
            task_id = rng.choice(live)
            try:
                await step(store, rng, task_id)
            except LmspError:  # e.g. cancel of a task that just finished: not a store bug
                pass
        row = await store.tasks.get(task_id)
        say("ack", task_id, row["state"], row["last_seq"])
        if S(row["state"]) not in UNFINISHED:
            live.remove(task_id)


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), int(sys.argv[2])))
