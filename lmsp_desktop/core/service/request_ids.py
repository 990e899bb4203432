"""Every answer's request id, as the SDKs read it: Anthropic's `request-id` header (and
`request_id` in its error bodies), OpenAI's `x-request-id`; and `x-should-retry: false` on the
statuses a retry cannot change. Added as the answer's headers are prepared (aiohttp's
`on_response_prepare`), errors and event streams included, without a middleware on the hot
path."""

from __future__ import annotations

import json

from aiohttp import web

from lmsp_desktop.core.api.failures import NO_RETRY, NOT_RETRIED
from lmsp_desktop.core.ids import new_id

REQUEST_ID = web.RequestKey("lmsp_request_id", str)
HEADERS = ("request-id", "x-request-id")


def request_id(request: web.Request) -> str:
    """The request's id (`req_…`), made on first use: one per request, never a secret."""
    found = request.get(REQUEST_ID)
    if found is None:
        found = request[REQUEST_ID] = new_id("req")
    return found


async def request_id_headers(request: web.Request, response: web.StreamResponse) -> None:
    """The request id in both SDKs' headers; in Anthropic's error body too (the anthropic
    SDK's `APIStatusError.request_id` reads the header, people read the body they logged)."""
    rid = request_id(request)
    headers = response.headers
    for name in HEADERS:
        headers[name] = rid
    status = response.status
    if status < 400:
        return
    if status in NOT_RETRIED:
        headers.update(NO_RETRY)
    if isinstance(response, web.Response):
        _anthropic_error_with_id(response, rid)


def _anthropic_error_with_id(response: web.Response, rid: str) -> None:
    """`request_id` beside `type` and `error` in an Anthropic error body (its shape is the
    one that starts with `"type": "error"`); the length follows the body (already counted)."""
    body = response.body
    if not isinstance(body, bytes) or not body.startswith(b'{"type": "error"'):
        return
    try:
        parsed = json.loads(body)
    except ValueError:
        return
    parsed["request_id"] = rid
    response.body = json.dumps(parsed).encode()
    response.headers["Content-Length"] = str(len(response.body))
