"""A web page allowed by the user (`--allow-origin`) calls a real `serve` as a browser does:
the CORS preflight (an OPTIONS without the token) is answered, the streamed answer and the
errors carry the page's own origin so its script can read them; any other page is refused
before anything runs, and an origin that is not one is refused at start with what to write."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from tests.integration.serve_process import ServeProcess, create_token, lmsp

PAGE = "http://localhost:3000"
OTHER = "http://evil.example"
MODEL = "smollm2-135m-instruct"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    data_dir: Path = tmp_path_factory.mktemp("origins") / "data"
    token = create_token(data_dir, "models:read,responses:read,responses:write")
    server = ServeProcess(data_dir, "--allow-origin", PAGE, "--allow-origin", "app://obsidian.md")
    url = server.start()
    try:
        yield url, token
    finally:
        server.terminate()


def preflight(origin: str) -> dict[str, str]:
    # What Chrome and Firefox send before a fetch() with Authorization and a JSON body.
    return {
        "Origin": origin,
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization,content-type",
    }


async def test_an_allowed_page_streams_a_chat_answer_it_can_read(
    served: tuple[str, str],
) -> None:
    url, token = served
    async with aiohttp.ClientSession(url) as http:
        async with http.options("/v1/chat/completions", headers=preflight(PAGE)) as asked:
            assert asked.status == 204
            assert asked.headers["Access-Control-Allow-Origin"] == PAGE
            assert "POST" in asked.headers["Access-Control-Allow-Methods"]
            assert asked.headers["Access-Control-Allow-Headers"] == "authorization,content-type"
        body = {
            "model": MODEL,
            "messages": [{"role": "user", "content": "Say hello."}],
            "max_tokens": 4,
            "stream": True,
        }
        headers = {"Origin": PAGE, "Authorization": f"Bearer {token}"}
        async with http.post("/v1/chat/completions", json=body, headers=headers) as streamed:
            assert streamed.status == 200
            # On the event stream too: its headers go out before the handler returns.
            assert streamed.headers["Access-Control-Allow-Origin"] == PAGE
            assert streamed.headers["Vary"] == "Origin"
            text = await streamed.text()
        assert text.rstrip().endswith("data: [DONE]") and '"content"' in text
        # A web-view app's origin works the same way.
        async with http.get(
            "/v1/models",
            headers={"Origin": "app://obsidian.md", "Authorization": f"Bearer {token}"},
        ) as listed:
            assert listed.status == 200
            assert listed.headers["Access-Control-Allow-Origin"] == "app://obsidian.md"


async def test_an_allowed_page_can_read_why_it_was_refused(served: tuple[str, str]) -> None:
    url, _ = served
    async with aiohttp.ClientSession(url) as http:
        headers = {"Origin": PAGE, "Authorization": "Bearer lmsp_wrong"}
        async with http.get("/v1/models", headers=headers) as refused:
            assert refused.status == 401
            assert refused.headers["Access-Control-Allow-Origin"] == PAGE
            assert (await refused.json())["error"]["code"] == "invalid_token"


async def test_another_page_is_refused_before_anything_runs(served: tuple[str, str]) -> None:
    url, token = served
    async with aiohttp.ClientSession(url) as http:
        async with http.options("/v1/chat/completions", headers=preflight(OTHER)) as asked:
            assert asked.status == 403
            assert "Access-Control-Allow-Origin" not in asked.headers
            error = (await asked.json())["error"]
        assert error["code"] == "origin_not_allowed"
        assert f"--allow-origin {OTHER}" in error["message"]
        auth = {"Authorization": f"Bearer {token}"}
        async with http.get("/v1/tasks", headers=auth) as tasks:
            before = len((await tasks.json())["data"])
        body = {"model": MODEL, "input": "hi", "max_output_tokens": 2, "background": True}
        async with http.post("/v1/responses", json=body, headers={"Origin": OTHER, **auth}) as sent:
            assert sent.status == 403
        async with http.get("/v1/tasks", headers=auth) as tasks:
            assert len((await tasks.json())["data"]) == before  # nothing was created for it


def test_an_origin_with_a_path_is_refused_at_start_saying_what_to_write(tmp_path: Path) -> None:
    done = lmsp("serve", "--port", "0", "--allow-origin", "localhost:3000/", data_dir=tmp_path)
    assert done.returncode != 0
    assert "is not a browser origin" in done.stderr and "http://localhost:3000" in done.stderr
