"""Creates by group commit (issue 26 item 1): concurrent creates share one transaction, yet
each caller hears back only after its own rows are committed, and a group whose transaction
fails fails every create in it with nothing written (idempotency claims included)."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from typing import Any

import pytest

from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.storage import db as db_module
from lmsp_desktop.core.storage.idempotency import IdempotencyClaim
from lmsp_desktop.core.storage.store import Store
from lmsp_desktop.core.storage.tasks import CreateResult
from tests.support.polling import until
from tests.support.store_helpers import check_invariants, new_task

CREATES = 20
HANG = 60.0  # a bound on a hang, not a timing assertion


def committed(store: Store, table: str) -> int:
    """Rows of `table` as another connection sees them: only what is committed."""
    conn = sqlite3.connect(store.db.path)
    try:
        return int(conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])
    finally:
        conn.close()


class Groups:
    """Wraps storage.db._run_group: records each group's size, and can hold a group in the
    writer thread after its work, before its COMMIT, or make it fail there as a disk would."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sizes: list[int] = []
        self.release = threading.Event()
        self.release.set()
        self.holding = threading.Event()
        self.fail_next = False
        original = db_module._run_group

        def last_unit(conn: sqlite3.Connection) -> None:
            if self.fail_next:
                self.fail_next = False
                conn.execute("ROLLBACK")  # what SQLite does itself after an I/O error
                raise sqlite3.OperationalError("disk I/O error")
            if not self.release.is_set():
                self.holding.set()
                self.release.wait(HANG)

        def run_group(conn: sqlite3.Connection, works: list[Any]) -> list[tuple[bool, Any]]:
            self.sizes.append(len(works))
            return original(conn, [*works, last_unit])[:-1]

        monkeypatch.setattr(db_module, "_run_group", run_group)


async def test_concurrent_creates_share_a_commit_and_answer_only_after_it(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    groups = Groups(monkeypatch)
    groups.release.clear()
    creates = [asyncio.create_task(store.tasks.create(new_task())) for _ in range(CREATES)]
    await until(groups.holding.is_set, what="the group held before its COMMIT")
    # Every row is written inside the open transaction; none is committed, none answered.
    assert committed(store, "tasks") == 0
    assert not any(create.done() for create in creates)
    groups.release.set()
    results = await asyncio.wait_for(asyncio.gather(*creates), HANG)
    # One transaction, one fsync for all of them (one unit of work: creates.py's batch).
    assert len(groups.sizes) == 1
    assert committed(store, "tasks") == CREATES
    assert sorted(r.body["task"]["queue_position"] for r in results) == list(range(1, CREATES + 1))
    check_invariants(store.db.path)


async def test_a_failed_group_fails_every_create_in_it_with_nothing_written(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    groups = Groups(monkeypatch)
    groups.fail_next = True
    claims = [IdempotencyClaim("client_a", f"key-{i}", f"digest-{i}") for i in range(CREATES)]
    specs = [new_task(client_id="client_a") for _ in range(CREATES)]
    outcomes = await asyncio.gather(
        *(store.tasks.create(spec, claim) for spec, claim in zip(specs, claims, strict=True)),
        return_exceptions=True,
    )
    assert len(groups.sizes) == 1
    assert all(isinstance(o, sqlite3.OperationalError) for o in outcomes), outcomes
    for table in ("responses", "tasks", "task_events", "idempotency_keys"):
        assert committed(store, table) == 0, table

    # The keys were never claimed: the same requests retried now create their tasks.
    retried = await asyncio.gather(
        *(store.tasks.create(spec, claim) for spec, claim in zip(specs, claims, strict=True))
    )
    assert all(r.status == 202 and not r.replayed for r in retried)
    assert committed(store, "tasks") == committed(store, "idempotency_keys") == CREATES
    check_invariants(store.db.path)


async def test_a_create_that_fails_its_own_checks_or_rows_fails_alone(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = await store.tasks.create(
        new_task(client_id="client_a"), IdempotencyClaim("client_a", "key", "digest")
    )
    groups = Groups(monkeypatch)
    reused = new_task(client_id="client_a")  # its key was sent before with another body: 422
    taken = new_task()
    taken.id = first.task_id  # its id is taken: its rows cannot be written
    specs = [new_task() for _ in range(CREATES)]
    specs[5:5] = [reused]
    specs[12:12] = [taken]
    outcomes = await asyncio.gather(
        *(
            store.tasks.create(
                spec, IdempotencyClaim("client_a", "key", "other") if spec is reused else None
            )
            for spec in specs
        ),
        return_exceptions=True,
    )
    assert len(groups.sizes) == 1  # all of them in one transaction
    assert isinstance(outcomes[5], LmspError) and outcomes[5].status == 422
    assert isinstance(outcomes[12], sqlite3.IntegrityError)
    created = [o for o in outcomes if isinstance(o, CreateResult)]
    assert len(created) == CREATES and all(r.status == 202 for r in created)
    # Their neighbours' failures left no trace in the queue they joined after the first.
    positions = [r.body["task"]["queue_position"] for r in created]
    assert positions == list(range(2, CREATES + 2))
    assert committed(store, "tasks") == CREATES + 1
    assert committed(store, "idempotency_keys") == 1
    check_invariants(store.db.path)


def _config_keys(store: Store) -> set[str]:
    conn = sqlite3.connect(store.db.path)
    try:
        return {row[0] for row in conn.execute("SELECT key FROM service_config")}
    finally:
        conn.close()


def _writes(key: str, *, then_fail: bool = False) -> Any:
    def work(conn: sqlite3.Connection) -> str:
        conn.execute("INSERT INTO service_config (key, value) VALUES (?, '1')", (key,))
        if then_fail:
            raise ValueError(f"{key}: bad input found halfway")
        return key

    return work


async def test_a_failing_unit_leaves_nothing_first_alone_or_among_others(store: Store) -> None:
    # Alone, and first in a group (no savepoint): its transaction is rolled back, and the
    # units queued after it commit in a new one.
    with pytest.raises(ValueError, match="alone"):
        await store.db.run(_writes("alone", then_fail=True))
    outcomes = await asyncio.gather(
        store.db.run(_writes("large", then_fail=True), large=True),
        store.db.run(_writes("before")),
        store.db.run(_writes("grouped", then_fail=True)),  # in its savepoint: undone alone
        store.db.run(_writes("after")),
        return_exceptions=True,
    )
    assert isinstance(outcomes[0], ValueError) and isinstance(outcomes[2], ValueError)
    assert outcomes[1] == "before" and outcomes[3] == "after"
    assert await store.db.run(_writes("later"), large=True) == "later"  # the writer goes on
    keys = _config_keys(store)
    assert {"before", "after", "later"} <= keys
    assert not keys & {"alone", "large", "grouped"}


async def test_a_large_unit_goes_first_in_its_transaction(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    groups: list[list[str]] = []
    original = db_module._run_group

    def run_group(conn: sqlite3.Connection, works: list[Any], **kw: Any) -> Any:
        groups.append([])
        outcomes = original(conn, works, **kw)
        groups[-1] = [value for _ok, value in outcomes]
        return outcomes

    monkeypatch.setattr(db_module, "_run_group", run_group)
    names = ["a1", "a2", "purge", "b1", "purge2", "b2"]
    done = await asyncio.gather(
        *(store.db.run(_writes(name), large=name.startswith("purge")) for name in names)
    )
    assert done == names
    # First, where no savepoint copies its pages; the others still share its commit. One
    # large unit per transaction.
    assert groups == [["purge", "a1", "a2", "b1"], ["purge2", "b2"]]
    assert set(names) <= _config_keys(store)
