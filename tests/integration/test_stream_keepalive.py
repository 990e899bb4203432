"""A stream waiting for its first token (a long prompt being read) shows it is alive: its
API's keep-alive every KEEPALIVE_S with nothing else sent — Anthropic's `ping` event, an SSE
comment on the OpenAI-shaped streams — so that clients' idle watchdogs do not drop it
(Claude Code dropped a turn silent for 300 s, then sent it again as a second request). The
real anthropic and openai clients read such a stream to its end as usual.

A served Core whose fake model holds its first token at a gate until the test opens it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest
from openai import OpenAI

from lmsp_desktop.core.api import answering
from lmsp_desktop.core.engines.fake import FakeEngine
from tests.integration.service_fixtures import MODEL, USER_SCOPES, LiveCore, auth

MESSAGES = [{"role": "user", "content": "Read this long prompt, then say hi."}]


@pytest.fixture
def held(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[LiveCore, FakeEngine]]:
    monkeypatch.setattr(answering, "KEEPALIVE_S", 0.05)
    engine = FakeEngine([" hi"] * 3)
    engine.gate = threading.Semaphore(0)
    live = LiveCore(tmp_path / "data", engine=engine)
    try:
        yield live, engine
    finally:
        assert engine.gate is not None
        engine.gate.release(1000)
        live.stop()


def silent_then_answered(
    live: LiveCore, engine: FakeEngine, path: str, body: dict[str, Any], marker: bytes
) -> tuple[bytes, bytes]:
    """The raw stream: what came before the gate opened (after `marker` was seen three
    times), and the whole of it."""
    assert engine.gate is not None
    seen = b""
    with httpx.stream(
        "POST",
        f"{live.url}{path}",
        json=body,
        headers=auth(live.token(*USER_SCOPES)),
        timeout=30,
    ) as r:
        assert r.status_code == 200, r.read()
        before = b""
        for chunk in r.iter_raw():
            seen += chunk
            if not before and seen.count(marker) >= 3:
                before = seen
                engine.gate.release(1000)  # the prompt is read: the tokens come
    return before, seen


def test_an_anthropic_stream_pings_while_waiting_for_its_first_token(
    held: tuple[LiveCore, FakeEngine],
) -> None:
    live, engine = held
    ping = b'event: ping\ndata: {"type":"ping"}\n\n'
    body = {"model": MODEL, "max_tokens": 3, "messages": MESSAGES, "stream": True}
    before, whole = silent_then_answered(live, engine, "/v1/messages", body, ping)
    assert before.startswith(b"event: message_start")
    assert b"content_block" not in before  # pings alone while nothing was generated
    assert whole.count(b"event: content_block_delta") == 3
    assert whole.rstrip().endswith(b'data: {"type":"message_stop"}')


def test_a_chat_completions_stream_sends_comments_while_waiting(
    held: tuple[LiveCore, FakeEngine],
) -> None:
    live, engine = held
    body = {"model": MODEL, "max_tokens": 3, "messages": MESSAGES, "stream": True}
    before, whole = silent_then_answered(
        live, engine, "/v1/chat/completions", body, b": keep-alive"
    )
    assert b'"content":" hi"' not in before
    assert whole.count(b'"content":" hi"') == 3
    assert whole.rstrip().endswith(b"data: [DONE]")


def test_the_real_clients_read_a_stream_with_keepalives_to_its_end(
    held: tuple[LiveCore, FakeEngine],
) -> None:
    live, engine = held
    assert engine.gate is not None
    token = live.token(*USER_SCOPES)
    # The gate opens only once each client has been kept waiting through several beats.
    threading.Timer(0.4, engine.gate.release, (3,)).start()
    claude = anthropic.Anthropic(base_url=live.url, api_key=token, max_retries=0, timeout=30)
    with claude, claude.messages.stream(model=MODEL, max_tokens=3, messages=MESSAGES) as stream:
        text = "".join(stream.text_stream)
    assert text == " hi hi hi"

    threading.Timer(0.4, engine.gate.release, (3,)).start()
    with OpenAI(base_url=f"{live.url}/v1", api_key=token, max_retries=0, timeout=30) as gpt:
        chunks = gpt.chat.completions.create(
            model=MODEL,
            messages=MESSAGES,
            max_tokens=3,
            stream=True,  # type: ignore[arg-type]
        )
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == " hi hi hi"
