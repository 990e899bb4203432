"""HTTP to one upstream: its model list, and a streamed generation over Chat Completions
(any OpenAI-compatible server) or Responses (another LMSP service, which also has a cancel
route).

Every wait is bounded: connecting and each read between chunks time out after the
upstream's `timeout_s`, so a silent upstream becomes an UpstreamFault, never a hang.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

log = logging.getLogger(__name__)
MESSAGE_LIMIT = 300  # characters of an upstream's error body kept in a task's error
PROBE_TIMEOUT_S = 10.0  # a model list is small: a silent upstream is shown down soon


class UpstreamFault(Exception):
    """The upstream failed. `retryable` faults (unreachable, timeout, 5xx, 429, a cut
    stream) may go better on another try; others (400, 401, 404) will not."""

    def __init__(self, message: str, *, retryable: bool = True) -> None:
        super().__init__(message)
        self.message = message
        self.retryable = retryable


@dataclass
class Probe:
    """What the last look at an upstream found."""

    reachable: bool
    latency_ms: float | None
    models: list[dict[str, Any]] = field(default_factory=list)
    kind: str = "openai"  # openai | lmsp
    error: str | None = None
    checked_at: float = field(default_factory=time.time)


@dataclass
class Chunk:
    """A piece of streamed output, or the end of the stream (finish_reason set)."""

    text: str = ""
    finish_reason: str | None = None  # stop | length
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int | None = None  # of the input tokens, those the upstream had cached


def _timeout(timeout_s: float, *, total: float | None = None) -> aiohttp.ClientTimeout:
    return aiohttp.ClientTimeout(
        total=total, connect=timeout_s, sock_connect=timeout_s, sock_read=timeout_s
    )


def _upstream_message(status: int, body: bytes) -> str:
    """The upstream's own words: `error.message` of an OpenAI-style body, else the text."""
    text = body.decode("utf-8", "replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):
        error = data.get("error", data.get("detail"))
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            text = error["message"]
        elif isinstance(error, str):
            text = error
    text = " ".join(text.split())[:MESSAGE_LIMIT] or "(no message)"
    return f"HTTP {status}: {text}"


class UpstreamClient:
    """One upstream's HTTP session. The key goes only into the Authorization header."""

    def __init__(self, name: str, base_url: str, api_key: str | None, timeout_s: float) -> None:
        self.name = name
        self.base_url = base_url
        self.timeout_s = timeout_s
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._session: aiohttp.ClientSession | None = None

    def __repr__(self) -> str:
        return f"UpstreamClient({self.name!r}, {self.base_url!r})"

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            # No connection limit of our own: the per-upstream concurrency limit is above.
            # A connection per request: a kept-alive connection reused after a stream broke
            # the next stream mid-way with llama_cpp.server (uvicorn) here; a TCP connect is
            # nothing next to a generation.
            connector = aiohttp.TCPConnector(limit=0, force_close=True)
            self._session = aiohttp.ClientSession(headers=self._headers, connector=connector)
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    # -- probing ---------------------------------------------------------------------------
    async def probe(self) -> Probe:
        """GET /models (timed); an LMSP upstream is told apart by its /v1/health."""
        started = time.perf_counter()
        try:
            models = await self._get_json(f"{self.base_url}/models")
            latency = (time.perf_counter() - started) * 1000
            kind = "openai"
            try:
                health = await self._get_json(f"{self.base_url}/health")
                if isinstance(health, dict) and "service_id" in health:
                    kind = "lmsp"
            except UpstreamFault:
                pass  # most OpenAI-compatible servers have no /v1/health
        except UpstreamFault as fault:
            return Probe(False, None, error=fault.message)
        items = models.get("data") if isinstance(models, dict) else None
        if not isinstance(items, list):
            return Probe(False, latency, error="its /v1/models answer has no `data` list")
        found = [m for m in items if isinstance(m, dict) and isinstance(m.get("id"), str)]
        return Probe(True, latency, found, kind)

    async def _get_json(self, url: str) -> Any:
        try:
            async with self._client().get(
                url, timeout=_timeout(limit := min(self.timeout_s, PROBE_TIMEOUT_S), total=limit)
            ) as response:
                body = await response.read()
                if response.status != 200:
                    raise UpstreamFault(_upstream_message(response.status, body))
                return json.loads(body)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise UpstreamFault(_describe(exc)) from None

    # -- generating ------------------------------------------------------------------------
    async def stream(
        self,
        kind: str,
        model: str,
        messages: list[dict[str, str]],
        options: dict[str, Any],
        on_id: Callable[[str], None] | None = None,
    ) -> AsyncGenerator[Chunk, None]:
        """Stream one generation. The caller closes the iterator to stop (cancel): that
        closes the HTTP stream, which stops a server that notices disconnects."""
        if kind == "lmsp":
            url = f"{self.base_url}/responses"
            body: dict[str, Any] = {
                "model": model,
                "input": [{"role": m["role"], "content": m["content"]} for m in messages],
                "stream": True,
                "store": True,
                **{k: v for k, v in options.items() if k != "max_tokens"},
            }
            if options.get("max_tokens") is not None:
                body["max_output_tokens"] = options["max_tokens"]
            parse: Callable[[str, Any], Chunk | None] = _responses_chunk
        else:
            url = f"{self.base_url}/chat/completions"
            body = {
                "model": model,
                "messages": [_chat_message(m) for m in messages],
                "stream": True,
                "stream_options": {"include_usage": True},
                **options,
            }
            parse = _chat_chunk
        try:
            async with self._client().post(
                url, json=body, timeout=_timeout(self.timeout_s)
            ) as response:
                if response.status != 200:
                    raw = await response.read()
                    raise UpstreamFault(
                        _upstream_message(response.status, raw),
                        retryable=response.status >= 500 or response.status in (408, 429),
                    )
                ended = False
                try:
                    async for event, data in _sse(response.content):
                        if event == "response.created" and on_id is not None:
                            response_id = data.get("response", {}).get("id")
                            if isinstance(response_id, str):
                                on_id(response_id)
                        chunk = parse(event, data)
                        if chunk is None:
                            continue
                        yield chunk
                        if chunk.finish_reason is not None:
                            ended = True
                except BaseException:
                    response.close()  # stopped mid-body (cancel, fault): drop the connection
                    raise
                if not ended:
                    raise UpstreamFault("the stream ended before the generation finished")
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise UpstreamFault(_describe(exc)) from None

    async def cancel(self, response_id: str) -> None:
        """Another LMSP's cancel route: stops its task even if the stream close is missed."""
        try:
            async with self._client().post(
                f"{self.base_url}/responses/{response_id}/cancel",
                timeout=_timeout(self.timeout_s, total=self.timeout_s),
            ) as response:
                await response.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.info("upstream %s: cancel of %s failed: %s", self.name, response_id, exc)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "no answer within the upstream's timeout"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"cannot connect: {exc.os_error.strerror or exc}"
    if isinstance(exc, aiohttp.ClientPayloadError | aiohttp.ServerDisconnectedError):
        return "the connection was closed in the middle of the answer"
    return str(exc) or type(exc).__name__


def _chat_message(message: dict[str, str]) -> dict[str, str]:
    # `developer` is recent; older OpenAI-compatible servers only know `system`.
    role = "system" if message["role"] == "developer" else message["role"]
    return {"role": role, "content": message["content"]}


async def _sse(content: aiohttp.StreamReader) -> AsyncIterator[tuple[str, Any]]:
    """(event type, JSON data) of each server-sent event; `[DONE]` ends the stream."""
    event = ""
    data_lines: list[str] = []
    async for raw in content:
        line = raw.decode("utf-8").rstrip("\r\n")
        if line:
            if line.startswith("data:"):
                data_lines.append(line[5:].lstrip(" "))
            elif line.startswith("event:"):
                event = line[6:].strip()
            continue
        if data_lines:
            data = "\n".join(data_lines)
            if data == "[DONE]":
                return
            try:
                parsed = json.loads(data)
            except ValueError:
                raise UpstreamFault(f"the upstream sent an unreadable event: {data[:80]}") from None
            yield event, parsed
        event, data_lines = "", []


def _chat_chunk(event: str, data: Any) -> Chunk | None:
    if not isinstance(data, dict):
        return None
    if "error" in data:  # some servers report a failure inside the stream
        error = data["error"]
        message = error.get("message") if isinstance(error, dict) else str(error)
        raise UpstreamFault(f"error in the stream: {message}")
    chunk = Chunk()
    usage = data.get("usage")
    if isinstance(usage, dict):
        chunk.input_tokens = usage.get("prompt_tokens")
        chunk.output_tokens = usage.get("completion_tokens")
        chunk.cached_tokens = _cached(usage.get("prompt_tokens_details"))
    for choice in data.get("choices") or []:
        delta = choice.get("delta") or {}
        if isinstance(delta.get("content"), str):
            chunk.text += delta["content"]
        reason = choice.get("finish_reason")
        if reason:
            chunk.finish_reason = "length" if reason == "length" else "stop"
    return chunk


def _cached(details: Any) -> int | None:
    """`cached_tokens` of a usage's prompt/input token details, if the upstream gave it."""
    value = details.get("cached_tokens") if isinstance(details, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _responses_chunk(event: str, data: Any) -> Chunk | None:
    kind = data.get("type", event) if isinstance(data, dict) else event
    if kind == "response.output_text.delta":
        return Chunk(text=str(data.get("delta", "")))
    if kind in ("response.completed", "response.incomplete"):
        usage = (data.get("response") or {}).get("usage") or {}
        return Chunk(
            finish_reason="stop" if kind == "response.completed" else "length",
            input_tokens=usage.get("input_tokens"),
            output_tokens=usage.get("output_tokens"),
            cached_tokens=_cached(usage.get("input_tokens_details")),
        )
    if kind == "response.failed":
        error = (data.get("response") or {}).get("error") or {}
        raise UpstreamFault(
            f"{error.get('code', 'failed')}: {error.get('message', '')}".strip(),
            retryable=error.get("code") in ("server_restarted", "upstream_unavailable"),
        )
    if kind == "error":
        error = data.get("error") or {}
        raise UpstreamFault(  # an LMSP upstream stopping ends its streams so: it comes back
            f"{error.get('code', 'error')}: {error.get('message', '')}",
            retryable=error.get("code") == "shutting_down",
        )
    return None
