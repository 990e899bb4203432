"""GET /v1/tasks shows each task's notes, as GET /v1/tasks/{id} does."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.integration.service_fixtures import MODEL, LiveCore
from tests.support.plain_http import plain_client

pytest_plugins = ["tests.integration.service_fixtures"]

PARIS = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture
def web(live: LiveCore) -> Iterator[httpx.Client]:
    with plain_client(live) as client:
        yield client


def test_the_task_list_shows_each_tasks_notes(web: httpx.Client) -> None:
    body = {"model": MODEL, "max_tokens": 2, "messages": PARIS, "service_tier": "auto"}
    made = web.post("/v1/messages", json=body)
    assert made.status_code == 200, made.text
    one = web.get(f"/v1/tasks/{made.json()['id']}").json()
    assert "`service_tier` is not used by this service." in one["notes"], one
    listed = web.get("/v1/tasks").json()["data"]
    assert [task["notes"] for task in listed] == [one["notes"]]
