"""Plain HTTP to a live service as one fresh client, its headers in view, and the SDKs as
that client (tests of what the SDKs see: request ids, error shapes, paging)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import anthropic
import httpx
import openai

from tests.integration.service_fixtures import USER_SCOPES, LiveCore


@contextlib.contextmanager
def plain_client(live: LiveCore, timeout: float = 300) -> Iterator[httpx.Client]:
    """httpx at the service as a fresh client with the ordinary scopes."""
    token = live.token(*USER_SCOPES)
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=live.url, headers=headers, timeout=timeout) as client:
        yield client


def token_of(web: httpx.Client) -> str:
    return web.headers["Authorization"].removeprefix("Bearer ")


def anthropic_sdk(web: httpx.Client) -> anthropic.Anthropic:
    """Base URL the service root, as Claude Code's ANTHROPIC_BASE_URL."""
    url = str(web.base_url).rstrip("/")
    return anthropic.Anthropic(base_url=url, api_key=token_of(web), max_retries=0, timeout=300)


def openai_sdk(web: httpx.Client) -> openai.OpenAI:
    url = str(web.base_url).rstrip("/") + "/v1"
    return openai.OpenAI(base_url=url, api_key=token_of(web), max_retries=0, timeout=300)
