"""An embedding's engine worker really killed (SIGKILL) while it computes: the embedding task
gets its restart policy like any task (engine-proc's crash path): `retry` and `resume` run
it again in a fresh worker and the waiting client gets the same vectors, `fail` answers the
client with engine_crashed naming the signal."""

from __future__ import annotations

import concurrent.futures
import os
import signal
from collections.abc import Iterator
from typing import Any

import numpy as np
import openai
import pytest
from openai import OpenAI

from tests.integration.serve_process import call
from tests.integration.service_fixtures import ALL_SCOPES, LiveCore
from tests.support.cut_model import NAME as MODEL
from tests.support.cut_model import cut_demo_model
from tests.support.polling import until_sync

# ~520 tokens: on a quiet machine a second or more of computing, against the few
# milliseconds between the test seeing the task run and its SIGKILL (the worker's pid is
# read before the request, so nothing else comes between). (It was ~2,800 tokens: computed
# twice per restart policy, minutes on a loaded machine.)
SENTENCE = "the lighthouse keeper watched the storm roll in. "
INPUTS = [f"Paragraph {n}: " + SENTENCE * 9 for n in range(6)]


@pytest.fixture(scope="module")
def live_crash(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveCore]:
    # The demo model cut to 4 blocks (tests/support/cut_model.py): what is claimed is each
    # restart policy's outcome and that a recomputed embedding equals the first one (within
    # a tolerance), neither the model's words nor exact numerics; a token costs a fifth of
    # the demo's CPU, and the embeddings here were most of this module's.
    live = LiveCore(
        tmp_path_factory.mktemp("embedding-crash"), model_dirs=[cut_demo_model().parent]
    )
    try:
        yield live
    finally:
        live.stop()


def running_embedding(live: LiveCore, token: str) -> dict[str, Any]:
    def found() -> dict[str, Any] | None:
        _status, page = call(f"{live.url}/v1/tasks?state=running", token)
        tasks = [t for t in page["data"] if t["kind"] == "embedding"]
        return tasks[0] if tasks else None

    return until_sync(found, 120, "the embedding task to be running", 0.01)


@pytest.mark.parametrize("policy", ["retry", "resume", "fail"])
def test_a_killed_worker_applies_the_embeddings_restart_policy(
    live_crash: LiveCore, policy: str
) -> None:
    live = live_crash
    token = live.token(*ALL_SCOPES)
    sdk = OpenAI(base_url=live.url + "/v1", api_key=token, max_retries=0, timeout=600)
    try:
        first = sdk.embeddings.create(model=MODEL, input=INPUTS[:2])
        expected = np.array([d.embedding for d in first.data])
        _status, model = call(f"{live.url}/v1/models/{MODEL}", token)
        pid = model["engine_pid"]  # the worker that computed `first` computes the next one
        assert pid and pid != os.getpid()
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(
                sdk.embeddings.create,
                model=MODEL,
                input=INPUTS,
                extra_body={"on_restart": policy},
            )
            victim = running_embedding(live, token)
            os.kill(pid, signal.SIGKILL)
            if policy == "fail":
                with pytest.raises(openai.APIStatusError) as failed:
                    waiting.result(600)
                assert failed.value.body["code"] == "engine_crashed"  # type: ignore[index]
                assert "SIGKILL" in failed.value.message
            else:
                answer = waiting.result(600)
                assert len(answer.data) == len(INPUTS)
                got = np.array([d.embedding for d in answer.data[:2]])
                assert np.allclose(got, expected, atol=3e-3)
        _status, ended = call(f"{live.url}/v1/tasks/{victim['id']}", token)
        assert ended["state"] == ("failed" if policy == "fail" else "completed"), ended
        assert ended["kind"] == "embedding"
        crash = call(f"{live.url}/v1/models/{MODEL}", token)[1]["engine_crash"]
        outcome = {"resume": "resumed", "retry": "requeued", "fail": "failed"}[policy]
        assert crash["signal"] == "SIGKILL" and crash["tasks"] == {outcome: 1}
    finally:
        sdk.close()
    # A crash resets once the model is loaded again (two within 10 minutes hold it).
    live.call(live.core.runner.load_again(MODEL), timeout=120)
