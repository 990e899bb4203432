"""Upstreams: the table and its keys, and tasks run by a scripted upstream through the real
runner and store (faults, retries by policy, cancel)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from lmsp_desktop.core.api.resource import build_response
from lmsp_desktop.core.api.responses.request import parse_create
from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.runner import Runner
from lmsp_desktop.core.states import TERMINAL, TaskState
from lmsp_desktop.core.storage.store import Store
from lmsp_desktop.core.storage.tasks import NewTask
from lmsp_desktop.core.storage.upstreams import (
    add_upstream,
    list_upstreams,
    normalise_url,
    remove_upstream,
)
from lmsp_desktop.core.upstreams import engine as upstream_engine
from lmsp_desktop.core.upstreams import keys
from lmsp_desktop.core.upstreams.catalog import UpstreamCatalog
from tests.support.fake_upstream import Behaviour, FakeUpstream
from tests.support.polling import until

SECRET = "sk-very-secret-0123456789"


# -- the table and keys ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("given", "stored"),
    [
        ("http://gpu:8000", "http://gpu:8000/v1"),
        ("http://gpu:8000/", "http://gpu:8000/v1"),
        ("http://gpu:8000/v1/", "http://gpu:8000/v1"),
        ("https://x.example/openai/v1", "https://x.example/openai/v1"),
    ],
)
def test_urls_are_normalised_to_the_v1_base(given: str, stored: str) -> None:
    assert normalise_url(given) == stored


@pytest.mark.parametrize("bad", ["gpu:8000", "ftp://gpu/v1", "http:///v1", "http://h/v1?x=1"])
def test_bad_urls_are_refused_naming_the_url(bad: str) -> None:
    with pytest.raises(LmspError) as caught:
        normalise_url(bad)
    assert caught.value.param == "url"


async def test_add_list_remove(store: Store) -> None:
    await add_upstream(store.db, "gpu", "http://127.0.0.1:9/v1", None, max_concurrency=3)
    rows = await list_upstreams(store.db)
    assert [(r.name, r.base_url, r.key_store, r.max_concurrency) for r in rows] == [
        ("gpu", "http://127.0.0.1:9/v1", "none", 3)
    ]
    with pytest.raises(LmspError) as dup:
        await add_upstream(store.db, "gpu", "http://127.0.0.1:9", None)
    assert dup.value.status == 409
    with pytest.raises(LmspError) as bad:
        await add_upstream(store.db, "GPU/x", "http://127.0.0.1:9", None)
    assert bad.value.param == "name"
    await remove_upstream(store.db, "gpu")
    assert await list_upstreams(store.db) == []
    with pytest.raises(LmspError) as gone:
        await remove_upstream(store.db, "gpu")
    assert gone.value.status == 404


async def test_without_a_keyring_the_key_is_in_the_database_only(store: Store) -> None:
    assert not keys.keyring_available()  # no Secret Service on this machine
    row = await add_upstream(store.db, "gpu", "http://127.0.0.1:9", SECRET)
    assert row.key_store == "database"
    assert SECRET not in json.dumps(row.public()) and SECRET not in repr(row)
    [listed] = await list_upstreams(store.db)
    assert listed.api_key is None  # not resolved unless asked for
    [usable] = await list_upstreams(store.db, with_keys=True)
    assert usable.api_key == SECRET and SECRET not in repr(usable)


class MemoryKeyring:
    """A keyring backend that keeps passwords in a dict (the OS one is absent here)."""

    priority = 10

    def __init__(self) -> None:
        self.saved: dict[tuple[str, str], str] = {}

    def set_password(self, service: str, user: str, password: str) -> None:
        self.saved[(service, user)] = password

    def get_password(self, service: str, user: str) -> str | None:
        return self.saved.get((service, user))

    def delete_password(self, service: str, user: str) -> None:
        del self.saved[(service, user)]


async def test_with_a_keyring_the_key_never_touches_the_database(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    ring = MemoryKeyring()

    class Module:
        set_password = ring.set_password
        get_password = ring.get_password
        delete_password = ring.delete_password

    monkeypatch.setattr(keys, "_keyring", lambda: Module)
    row = await add_upstream(store.db, "gpu", "http://127.0.0.1:9", SECRET)
    assert row.key_store == "keyring"
    raw = await store.db.fetchall("SELECT * FROM upstreams")
    assert SECRET not in json.dumps([dict(r) for r in raw])
    [usable] = await list_upstreams(store.db, with_keys=True)
    assert usable.api_key == SECRET
    await remove_upstream(store.db, "gpu")
    assert ring.saved == {}


# -- tasks through a scripted upstream --------------------------------------------------------
class NoLocalModels:
    async def path_for_run(self, model_id: str) -> Path:
        raise AssertionError(f"{model_id} is an upstream model, not a file")


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(upstream_engine, "BACKOFF_S", 0.01)


async def start(store: Store, fake: FakeUpstream, timeout_s: float = 5.0) -> Runner:
    await fake.start()
    await add_upstream(store.db, "up", fake.url, SECRET, timeout_s=timeout_s)
    catalog = UpstreamCatalog(store.db)
    await catalog.refresh()
    await catalog.probe_all()
    runner = Runner(store.tasks, NoLocalModels(), FakeEngine(), remote=catalog)
    await runner.start()
    runner._catalog = catalog  # type: ignore[attr-defined]  # closed by `stop`
    return runner


async def stop(runner: Runner, fake: FakeUpstream) -> None:
    await runner.stop()
    await runner._catalog.close()  # type: ignore[attr-defined]
    await fake.stop()


@pytest.fixture
async def env(store: Store) -> AsyncIterator[dict[str, Any]]:
    made: dict[str, Any] = {}
    yield made
    if "runner" in made:
        await stop(made["runner"], made["fake"])


async def run_task(
    store: Store, env: dict[str, Any], script: list[Behaviour], policy: str = "fail", **kw: Any
) -> Any:
    env["fake"] = FakeUpstream(script)
    env["runner"] = await start(store, env["fake"], **kw)
    request = parse_create({"model": "up/m1", "input": "hi", "on_restart": policy}, "fail")
    created = await store.tasks.create(NewTask("up/m1", request, on_restart=request["on_restart"]))

    async def finished_row() -> Any:
        row = await store.tasks.get(created.task_id)
        return row if TaskState(row["state"]) in TERMINAL else None

    return await until(finished_row, limit=60, what="the task to finish")


async def event_types(store: Store, task_id: str) -> list[str]:
    return [e["type"] for e in await store.tasks.events(task_id)]


async def test_a_stream_becomes_the_tasks_output_and_the_key_is_sent(
    store: Store, env: dict[str, Any]
) -> None:
    row = await run_task(store, env, [Behaviour(words=["Bon", "jour", "!"])])
    assert row["state"] == "completed" and row["output_text"] == "Bonjour!"
    assert env["fake"].auth == [f"Bearer {SECRET}"]
    assert env["fake"].requests[0]["model"] == "m1"  # the upstream's own name for it
    assert env["fake"].requests[0]["stream"] is True
    assert row["cached_tokens"] == 0  # the upstream did not say: none claimed


async def test_the_upstreams_cached_tokens_become_the_tasks_usage(
    store: Store, env: dict[str, Any]
) -> None:
    row = await run_task(store, env, [Behaviour(words=["a", "b"], cached_tokens=5)])
    assert row["state"] == "completed" and (row["input_tokens"], row["cached_tokens"]) == (9, 5)
    usage = build_response(row)["usage"]
    assert usage["input_tokens"] == 9 and usage["input_tokens_details"]["cached_tokens"] == 5


async def test_500_is_retried_then_fails_with_the_upstreams_message(
    store: Store, env: dict[str, Any]
) -> None:
    row = await run_task(store, env, [Behaviour("error")] * upstream_engine.ATTEMPTS)
    error = json.loads(row["error"])
    assert row["state"] == "failed" and error["code"] == "upstream_unavailable"
    assert "the GPU is on fire" in error["message"] and "HTTP 500" in error["message"]
    assert len(env["fake"].requests) == upstream_engine.ATTEMPTS


async def test_a_passing_500_is_retried_and_the_task_completes(
    store: Store, env: dict[str, Any]
) -> None:
    row = await run_task(store, env, [Behaviour("error"), Behaviour(words=["ok"])])
    assert row["state"] == "completed" and row["output_text"] == "ok"


async def test_400_is_not_retried(store: Store, env: dict[str, Any]) -> None:
    row = await run_task(store, env, [Behaviour("error", status=400, message="bad model")])
    assert row["state"] == "failed" and "bad model" in json.loads(row["error"])["message"]
    assert len(env["fake"].requests) == 1


async def test_an_upstream_that_never_answers_fails_the_task(
    store: Store, env: dict[str, Any]
) -> None:
    script = [Behaviour("silent")] * upstream_engine.ATTEMPTS
    row = await run_task(store, env, script, timeout_s=0.3)
    error = json.loads(row["error"])
    assert row["state"] == "failed" and error["code"] == "upstream_unavailable"
    assert "timeout" in error["message"]


async def test_a_cut_stream_resumes_from_the_text_so_far(store: Store, env: dict[str, Any]) -> None:
    script = [Behaviour("cut", words=["One", " two"]), Behaviour(words=[" three", "."])]
    row = await run_task(store, env, script, policy="resume")
    assert row["state"] == "completed" and row["output_text"] == "One two three."
    second = env["fake"].requests[1]
    assert second["messages"][-1] == {"role": "assistant", "content": "One two"}
    # vLLM continues the message itself (rather than a new turn) when asked like this.
    assert second["continue_final_message"] is True and second["add_generation_prompt"] is False


async def test_an_upstream_refusing_the_continue_fields_is_asked_without(
    store: Store, env: dict[str, Any]
) -> None:
    script = [
        Behaviour("cut", words=["One"]),
        Behaviour("error", status=400, message="unknown field continue_final_message"),
        Behaviour(words=[" two"]),
    ]
    row = await run_task(store, env, script, policy="resume")
    assert row["state"] == "completed" and row["output_text"] == "One two"
    third = env["fake"].requests[2]
    assert "continue_final_message" not in third and third["messages"][-1]["content"] == "One"


async def test_a_cut_stream_with_retry_starts_over(store: Store, env: dict[str, Any]) -> None:
    script = [Behaviour("cut", words=["Lost", " words"]), Behaviour(words=["Fresh", "."])]
    row = await run_task(store, env, script, policy="retry")
    assert row["state"] == "completed" and row["output_text"] == "Fresh."
    types = await event_types(store, row["id"])
    assert "response.queued" in types and row["restarts"] == 1
    assert env["fake"].requests[1]["messages"][-1]["role"] == "user"


async def test_a_cut_stream_with_fail_fails(store: Store, env: dict[str, Any]) -> None:
    row = await run_task(store, env, [Behaviour("cut", words=["a", "b"])], policy="fail")
    error = json.loads(row["error"])
    assert row["state"] == "failed" and error["code"] == "upstream_unavailable"
    assert "closed in the middle" in error["message"] or "ended before" in error["message"]
    assert row["output_text"] == "ab"  # the partial output is kept


async def test_cancel_closes_the_upstream_stream_at_once(store: Store, env: dict[str, Any]) -> None:
    # The upstream sends three chunks and then nothing (a slow token): the cancel must not
    # wait for the next chunk or the 60 s timeout.
    env["fake"] = FakeUpstream([Behaviour(words=["w"] * 3, stall=True)])
    env["runner"] = await start(store, env["fake"], timeout_s=60)
    request = parse_create({"model": "up/m1", "input": "hi"}, "fail")
    created = await store.tasks.create(NewTask("up/m1", request))

    async def three_tokens() -> bool:
        return bool((await store.tasks.get(created.task_id))["output_tokens"] >= 3)

    await until(three_tokens, limit=60, what="three tokens")
    await store.tasks.cancel(created.task_id)

    async def cancelled_and_closed() -> Any:
        row = await store.tasks.get(created.task_id)
        return row if row["state"] == "cancelled" and env["fake"].disconnects else None

    row = await until(cancelled_and_closed, limit=60, what="the cancel and the disconnect")
    assert row["state"] == "cancelled" and env["fake"].disconnects == 1
    assert row["output_tokens"] == 3


async def test_another_lmsp_is_spoken_to_over_responses_and_its_cancel_route(
    store: Store, env: dict[str, Any]
) -> None:
    env["fake"] = FakeUpstream(
        [Behaviour(words=["a", "b"], cached_tokens=4), Behaviour(stall=True)], lmsp=True
    )
    env["runner"] = await start(store, env["fake"], timeout_s=60)
    request = parse_create({"model": "up/m1", "input": "hi", "max_output_tokens": 9}, "fail")
    done = await store.tasks.create(NewTask("up/m1", request))
    stalled = await store.tasks.create(NewTask("up/m1", request))

    async def completed() -> Any:
        row = await store.tasks.get(done.task_id)
        return row if row["state"] == "completed" else None

    first = await until(completed, limit=60, what="the first task to complete")
    assert first["output_text"] == "ab" and first["input_tokens"] == 7
    assert first["cached_tokens"] == 4  # the other LMSP's input_tokens_details
    assert env["fake"].requests[0]["max_output_tokens"] == 9  # Responses' name for it
    await store.tasks.cancel(stalled.task_id)
    await until(
        lambda: env["fake"].cancelled and env["fake"].disconnects,
        limit=60,
        what="the cancel route and the disconnect",
    )
    assert env["fake"].cancelled == ["resp_remote1"] and env["fake"].disconnects == 1


async def test_another_lmsp_stopping_mid_stream_is_retried(
    store: Store, env: dict[str, Any]
) -> None:
    """Another LMSP service that stops ends its stream with `error` shutting_down: that one
    comes back, so the stream is tried again (resumed from the text so far), as a cut one is."""
    script = [Behaviour(words=["One", " two"], stopping=True), Behaviour(words=[" three", "."])]
    env["fake"] = FakeUpstream(script, lmsp=True)
    env["runner"] = await start(store, env["fake"], timeout_s=60)
    request = parse_create({"model": "up/m1", "input": "hi", "on_restart": "resume"}, "fail")
    created = await store.tasks.create(NewTask("up/m1", request, on_restart="resume"))

    async def finished_row() -> Any:
        row = await store.tasks.get(created.task_id)
        return row if TaskState(row["state"]) in TERMINAL else None

    row = await until(finished_row, limit=60, what="the task to finish")
    assert row["state"] == "completed" and row["output_text"] == "One two three.", row["error"]
    assert env["fake"].requests[1]["input"][-1]["content"] == "One two"


async def test_concurrency_limit_per_upstream(store: Store, env: dict[str, Any]) -> None:
    env["fake"] = FakeUpstream([Behaviour(words=["x"] * 20, delay_s=0.02)] * 6)
    await env["fake"].start()
    await add_upstream(store.db, "up", env["fake"].url, None, max_concurrency=2)
    catalog = UpstreamCatalog(store.db)
    await catalog.refresh()
    await catalog.probe_all()
    running_max = 0

    def watch(change: Any) -> None:
        nonlocal running_max
        running_max = max(running_max, len(runner._active))

    store.tasks.listeners.append(watch)
    runner = Runner(store.tasks, NoLocalModels(), FakeEngine(), remote=catalog)
    runner._catalog = catalog  # type: ignore[attr-defined]
    env["runner"] = runner
    await runner.start()
    ids = []
    for _ in range(6):
        request = parse_create({"model": "up/m1", "input": "hi"}, "fail")
        ids.append((await store.tasks.create(NewTask("up/m1", request))).task_id)

    async def all_finished() -> Any:
        rows = [await store.tasks.get(i) for i in ids]
        return rows if all(TaskState(r["state"]) in TERMINAL for r in rows) else None

    rows = await until(all_finished, limit=60, what="all six tasks to finish")
    assert [r["state"] for r in rows] == ["completed"] * 6
    assert running_max == 2


@pytest.mark.parametrize(
    "extra",
    [
        {"grammar": 'root ::= "{}"'},
        {"tools": [{"name": "f", "description": "", "parameters": {}, "strict": False}]},
    ],
)
async def test_tools_and_structured_output_are_refused_plainly(extra: dict[str, Any]) -> None:
    from lmsp_desktop.core.engines.base import EngineError, GenerationRequest
    from lmsp_desktop.core.upstreams.client import UpstreamClient
    from lmsp_desktop.core.upstreams.engine import Upstream, UpstreamModel

    model = UpstreamModel(Upstream(UpstreamClient("up", "http://127.0.0.1:9/v1", None, 1), 1), "m")

    async def sink(pieces: Any) -> bool:
        raise AssertionError("nothing may be generated")

    request = GenerationRequest(messages=[{"role": "user", "content": "hi"}], **extra)
    with pytest.raises(EngineError) as refused:
        await model.generate(request, sink)
    assert refused.value.code == "unsupported_on_upstream"


async def test_an_unknown_upstream_or_model_is_404_model_not_found(store: Store) -> None:
    from lmsp_desktop.core.models.registry import ModelRegistry

    fake = FakeUpstream([], models=("m1",))
    await fake.start()
    registry = ModelRegistry(store.db, [], include_demo=False)
    registry.upstreams = catalog = UpstreamCatalog(store.db)
    await add_upstream(store.db, "up", fake.url, None)
    await catalog.refresh()
    await catalog.probe_all()
    try:
        assert (await registry.get("up/m1")).id == "up/m1"
        assert [m.id for m in await registry.list_models()] == ["up/m1"]
        for missing, words in [("up/m2", "no model 'm2'"), ("gone/m1", "no upstream named gone")]:
            with pytest.raises(LmspError) as caught:
                await registry.get(missing)
            assert (caught.value.status, caught.value.code, caught.value.param) == (
                404,
                "model_not_found",
                "model",
            )
            assert words in caught.value.message
    finally:
        await catalog.close()
        await fake.stop()
