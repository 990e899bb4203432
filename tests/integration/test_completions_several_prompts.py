"""Several prompts in one legacy completion (`prompt` a list, and `n`), as OpenAI, vLLM and
llama-server answer them: one choice per prompt times n, `index` = prompt × n + j, usage
summed, streamed with each chunk's index. Through a real `serve --max-context 512`, the demo
model and the openai SDK. (It answered 400 "one prompt per request".)"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from lmsp_desktop.core.context_window import _Vocab
from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.core.models.demo import demo_model_path
from tests.integration.serve_process import ServeProcess, call, create_token
from tests.integration.service_fixtures import MODEL, USER_SCOPES, LiveCore
from tests.integration.test_stream_shutdown import left_in_store
from tests.support.polling import until_sync

PROMPTS = ["The capital of France is", "One, two, three,"]
GREEDY: dict[str, Any] = {"model": MODEL, "max_tokens": 5, "temperature": 0}


class Served:
    def __init__(self, data_dir: Path, url: str) -> None:
        self.data_dir = data_dir
        self.url = url

    def token(self) -> str:
        """A client of its own (a client sees only its own tasks)."""
        return create_token(self.data_dir, ",".join(USER_SCOPES), name="choices")

    def tasks(self, token: str) -> list[dict[str, Any]]:
        status, listed = call(f"{self.url}/v1/tasks", token)
        assert status == 200, listed
        return list(listed["data"])


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    data_dir = tmp_path_factory.mktemp("choices") / "data"
    create_token(data_dir, "admin")  # the store exists before serve opens it
    server = ServeProcess(data_dir, "--max-context", "512")
    try:
        yield Served(data_dir, server.start())
    finally:
        server.terminate()


@pytest.fixture
def sdk(served: Served) -> Iterator[tuple[openai.OpenAI, str]]:
    token = served.token()
    client = openai.OpenAI(base_url=f"{served.url}/v1", api_key=token, max_retries=0, timeout=300)
    with client:
        yield client, token


def alone(client: openai.OpenAI, prompt: str | list[int]) -> openai.types.Completion:
    return client.completions.create(prompt=prompt, **GREEDY)


def test_one_choice_per_prompt_times_n_with_usage_summed(
    served: Served, sdk: tuple[openai.OpenAI, str]
) -> None:
    client, token = sdk
    each = [alone(client, p) for p in PROMPTS]
    both = client.completions.create(prompt=PROMPTS, n=2, **GREEDY)  # it was a 400
    assert [c.index for c in both.choices] == [0, 1, 2, 3]
    # Greedy: choice j of prompt i is that prompt's completion alone.
    assert [c.text for c in both.choices] == [e.choices[0].text for e in each for _ in (0, 1)]
    assert all(
        c.finish_reason == e.choices[0].finish_reason
        for c, e in zip(both.choices[::2], each, strict=True)
    )
    assert both.usage is not None
    used = [e.usage for e in each]
    assert all(u is not None for u in used)
    assert both.usage.prompt_tokens == 2 * sum(u.prompt_tokens for u in used if u)
    assert both.usage.completion_tokens == 2 * sum(u.completion_tokens for u in used if u)
    # Each choice is a task of its own, listed as any other; the answer is the first's.
    listed = served.tasks(token)
    assert len(listed) == 2 + 4 and both.id in {t["id"] for t in listed}
    # Prompts as token ids, and as a list of lists of them.
    ids = [demo_tokens(p) for p in PROMPTS]
    as_ids = client.completions.create(prompt=ids, **GREEDY)
    assert [c.text for c in as_ids.choices] == [e.choices[0].text for e in each]


def test_the_stream_carries_each_choices_index_then_the_summed_usage(
    sdk: tuple[openai.OpenAI, str],
) -> None:
    client, _token = sdk
    whole = client.completions.create(prompt=PROMPTS, **GREEDY)
    texts: dict[int, str] = defaultdict(str)
    finished: dict[int, str | None] = {}
    ids = set()
    usage = None
    stream = client.completions.create(
        prompt=PROMPTS, stream=True, stream_options={"include_usage": True}, **GREEDY
    )
    with stream:
        for chunk in stream:
            ids.add(chunk.id)
            if chunk.usage is not None:
                usage = chunk.usage
            for choice in chunk.choices:
                texts[choice.index] += choice.text
                if choice.finish_reason is not None:
                    finished[choice.index] = choice.finish_reason
    assert dict(texts) == {c.index: c.text for c in whole.choices}
    assert finished == {c.index: c.finish_reason for c in whole.choices}
    assert len(ids) == 1  # one completion, as OpenAI's chunks share one id
    assert usage is not None and whole.usage is not None
    assert usage.prompt_tokens == whole.usage.prompt_tokens
    assert usage.completion_tokens == whole.usage.completion_tokens


def test_a_refused_prompt_leaves_nothing_running(
    served: Served, sdk: tuple[openai.OpenAI, str]
) -> None:
    client, token = sdk
    too_long = "word " * 1000
    with pytest.raises(openai.BadRequestError) as refused:
        client.completions.create(prompt=[PROMPTS[0], too_long], **GREEDY)
    assert "maximum context length is 512" in refused.value.message
    assert served.tasks(token) == []  # every prompt admitted before any task was made


def test_an_idempotent_retry_gets_the_whole_answer_again(served: Served) -> None:
    token = served.token()
    headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": "several-prompts-1"}
    body = {"prompt": PROMPTS, **GREEDY}
    with httpx.Client(base_url=served.url, headers=headers, timeout=300) as web:
        first = web.post("/v1/completions", json=body)
        again = web.post("/v1/completions", json=body)
    assert first.status_code == again.status_code == 200, first.text
    assert again.headers.get("Idempotent-Replayed") == "true"
    assert again.json()["choices"] == first.json()["choices"]
    assert [t["id"] for t in first.json()["tasks"]] == [t["id"] for t in again.json()["tasks"]]
    assert len(served.tasks(token)) == 2


def demo_tokens(text: str) -> list[int]:
    path = demo_model_path()
    assert path is not None
    vocab = _Vocab(Path(path), None)
    try:
        return vocab._tokenize(text.encode(), False, True)
    finally:
        vocab.close()


def test_a_choice_cancelled_ends_the_stream_and_cancels_the_others(
    served: Served, sdk: tuple[openai.OpenAI, str]
) -> None:
    client, token = sdk
    long = {"model": MODEL, "max_tokens": 400, "temperature": 0}
    stream = client.completions.create(
        prompt=["1, 2, 3, 4, 5,", "10, 20, 30, 40,"],  # counting goes on to the limit
        stream=True,
        **long,
    )
    cancelled = False
    with pytest.raises(openai.APIError) as ended, stream:
        for chunk in stream:
            if not cancelled and chunk.choices and chunk.choices[0].index == 0:
                [second] = [t for t in served.tasks(token) if t["id"] != chunk.id]
                status, _ = call(f"{served.url}/v1/tasks/{second['id']}/cancel", token, "POST")
                assert status == 200, (_, served.tasks(token))
                cancelled = True
    assert ended.value.code == "cancelled", ended.value

    # Nobody reads the first choice any more: its task is cancelled too, not left running.
    def states() -> set[str]:
        return {t["state"] for t in served.tasks(token)}

    until_sync(lambda: states() == {"cancelled"}, what=states)


def test_a_choice_cancelled_fails_the_answer_and_cancels_the_others(
    served: Served, sdk: tuple[openai.OpenAI, str]
) -> None:
    client, token = sdk
    with ThreadPoolExecutor(1) as waiting:
        answer = waiting.submit(
            client.completions.create,
            prompt=["1, 2, 3, 4, 5,", "10, 20, 30, 40,"],
            model=MODEL,
            max_tokens=400,
            temperature=0,
        )
        started = until_sync(lambda: [t for t in served.tasks(token) if t["state"] == "running"])
        status, _ = call(f"{served.url}/v1/tasks/{started[0]['id']}/cancel", token, "POST")
        assert status == 200
        with pytest.raises(openai.APIError) as failed:
            answer.result(timeout=120)
    # The cancelled choice's error (not a cancel it caused), the other choice cancelled
    # rather than generated for nobody.
    assert started[0]["id"] in failed.value.message
    assert {t["state"] for t in served.tasks(token)} == {"cancelled"}


def test_a_stop_ends_the_stream_with_shutting_down_and_leaves_every_choice(
    tmp_path: Path,
) -> None:
    """The service stopping mid-stream (the app's Quit, serve's signals): the stream ends
    with the stopping error, and no choice's task is cancelled: each is left for recovery."""
    live = LiveCore(tmp_path / "data", engine=FakeEngine([" lorem"] * 1000, token_delay=0.05))
    try:
        client = openai.OpenAI(
            base_url=f"{live.url}/v1", api_key=live.token(*USER_SCOPES), max_retries=0
        )
        with client, pytest.raises(openai.APIError) as raised:
            stream = client.completions.create(
                model=MODEL, prompt=["Tell a story.", "Tell another."], max_tokens=400, stream=True
            )
            for chunk in stream:
                if chunk.choices and chunk.choices[0].text:
                    live.stop_started()
        live.stop_started().result(60)
    finally:
        live.stop()
    assert raised.value.code == "shutting_down", raised.value
    left = left_in_store(live.data_dir)
    assert len(left) == 2 and all(state in ("running", "queued") for state, _ in left.values())
