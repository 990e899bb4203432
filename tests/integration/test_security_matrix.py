"""The security matrix against a real `serve` (real demo model, real data directory):
every endpoint × every kind of caller, others' tasks, DNS rebinding and browser origins,
pairing brute force, model ids that try to leave the model folders, file modes, and no
plaintext token left in the database, its WAL or the logs."""

from __future__ import annotations

import http.client
import json
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import pytest

from lmsp_desktop.core.pairing import MAX_FAILURES
from tests.integration.serve_process import ServeProcess, create_token, lmsp
from tests.support.fake_core import running_core, token
from tests.support.polling import until_sync

MODEL = "smollm2-135m-instruct"
SCOPES = ("models:read", "responses:read", "responses:write", "admin")


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Service:
    """The running serve, the tokens it issued, and every answer's headers seen."""

    server: ServeProcess
    data_dir: Path
    host: str
    port: int
    tokens: dict[str, str] = field(default_factory=dict)  # caller name → bearer token
    issued: list[str] = field(default_factory=list)  # every secret ever handed out
    seen_headers: list[dict[str, str]] = field(default_factory=list)

    def request(
        self,
        method: str,
        path: str,
        token: str | None = None,
        body: Any = None,
        headers: dict[str, str] | None = None,
        authorization: str | None = None,
    ) -> Answer:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
        sent = {"Host": f"{self.host}:{self.port}", **(headers or {})}
        if token is not None:
            sent["Authorization"] = f"Bearer {token}"
        if authorization is not None:
            sent["Authorization"] = authorization
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            sent["Content-Type"] = "application/json"
        try:
            conn.request(method, path, body=data, headers=sent)
            response = conn.getresponse()
            answer = Answer(response.status, dict(response.getheaders()), response.read())
        finally:
            conn.close()
        self.seen_headers.append(answer.headers)
        return answer

    def new_token(self, name: str, scopes: str) -> str:
        # As `lmsp-desktop token create --name NAME --scopes SCOPES` makes it, in this
        # process: the matrix is about the service (test_cli_admin runs the command).
        secret = create_token(self.data_dir, scopes, name)
        self.issued.append(secret)
        return secret

    def wait_finished(self, task_id: str, token: str) -> dict[str, Any]:
        def finished() -> dict[str, Any] | None:
            task: dict[str, Any] = self.request("GET", f"/v1/tasks/{task_id}", token).json()
            return (
                task
                if task["state"] in ("completed", "incomplete", "failed", "cancelled")
                else None
            )

        return until_sync(finished, 60, f"{task_id} to finish", interval=0.05)


@pytest.fixture(scope="module")
def svc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    data_dir = tmp_path_factory.mktemp("security") / "data"
    server = ServeProcess(data_dir)
    url = urlsplit(server.start())
    service = Service(server, data_dir, url.hostname or "127.0.0.1", url.port or 0)
    try:
        for scope in SCOPES:
            service.tokens[scope] = service.new_token(f"only-{scope}", scope)
        service.tokens["owner"] = service.new_token("owner", "responses:read,responses:write")
        revoked = service.new_token("revoked", ",".join(SCOPES))
        clients = service.request("GET", "/v1/clients", service.tokens["admin"]).json()["data"]
        revoked_id = next(c["id"] for c in clients if c["name"] == "revoked")
        assert (
            service.request("DELETE", f"/v1/clients/{revoked_id}", service.tokens["admin"]).status
            == 200
        )
        service.tokens["revoked"] = revoked
        yield service
    finally:
        if server.proc is not None and server.proc.poll() is None:
            server.terminate()


@pytest.fixture(scope="module")
def owned_task(svc: Service) -> str:
    """A finished task of the `owner` client (responses:read + responses:write)."""
    answer = svc.request(
        "POST",
        "/v1/responses",
        svc.tokens["owner"],
        {
            "model": MODEL,
            "input": "Hi.",
            "max_output_tokens": 2,
            "temperature": 0,
            "background": True,
        },
    )
    assert answer.status == 202, answer.body
    task_id: str = answer.json()["id"]
    svc.wait_finished(task_id, svc.tokens["owner"])
    return task_id


@pytest.fixture(scope="module")
def owned_chat(svc: Service) -> str:
    """A finished chat completion of the `owner` client."""
    answer = svc.request("POST", "/v1/chat/completions", svc.tokens["owner"], CHAT)
    assert answer.status == 200, answer.body
    completion_id: str = answer.json()["id"]
    return completion_id


# -- every endpoint × every caller ---------------------------------------------------------------
# (method, path template, scope needed or None for public, status when allowed)
ENDPOINTS = [
    ("GET", "/v1/health", None, 200),
    ("GET", "/v1/openapi.json", None, 200),
    ("GET", "/v1/models", "models:read", 200),
    ("GET", f"/v1/models/{MODEL}", "models:read", 200),
    ("POST", "/v1/responses", "responses:write", 202),
    ("GET", "/v1/responses/{task}", "responses:read", 200),
    ("POST", "/v1/responses/{task}/cancel", "responses:write", 409),  # it has finished
    ("DELETE", "/v1/responses/resp_000000000000000000000000", "responses:write", 404),
    ("GET", "/v1/tasks", "responses:read", 200),
    ("GET", "/v1/tasks/{task}", "responses:read", 200),
    ("GET", "/v1/tasks/{task}/events", "responses:read", 200),
    ("GET", "/v1/responses/{task}/input_items", "responses:read", 200),
    ("POST", "/v1/tasks/{task}/cancel", "responses:write", 409),  # it has finished
    ("POST", "/v1/chat/completions", "responses:write", 200),
    ("POST", "/v1/messages", "responses:write", 200),
    ("POST", "/v1/messages/count_tokens", "models:read", 200),
    ("POST", "/v1/completions", "responses:write", 200),
    ("GET", "/v1/chat/completions/{chat}", "responses:read", 200),
    ("DELETE", "/v1/chat/completions/chatcmpl-000000000000000000000000", "responses:write", 404),
    ("GET", "/v1/clients", "admin", 200),
    ("DELETE", "/v1/clients/client_000000000000000000000000", "admin", 404),
    ("GET", "/v1/recovery/last", "admin", 0),  # 0: 200 with a report, 404 without
    ("GET", "/v1/metrics", "admin", 200),
    ("POST", "/v1/models/pull", "admin", 400),  # no body: refused before the hub is asked
    ("POST", f"/v1/models/{MODEL}/verify", "admin", 200),  # the Models page's Verify selected
    ("POST", "/v1/models/rescan", "admin", 200),  # and its Rescan
    ("POST", f"/v1/models/{MODEL}/load", "admin", 200),  # its Load again
    ("POST", f"/v1/models/{MODEL}/unload", "admin", 200),  # `ollama stop`, `lms unload`
    ("GET", "/api/version", "models:read", 200),  # Ollama's API: the same tokens and scopes
    ("GET", "/api/tags", "models:read", 200),
    ("GET", "/api/ps", "models:read", 200),
    ("POST", "/api/show", "models:read", 200),
    ("POST", "/api/chat", "responses:write", 200),
    ("POST", "/v1/embeddings", "responses:write", 200),
    ("POST", "/api/embed", "responses:write", 200),
    ("POST", "/api/embeddings", "responses:write", 200),
]
CALLERS = [
    "no token",
    "not bearer",
    "not a token",
    "unknown token",
    "revoked",
    *SCOPES,
    "owner",
]
CREATE = {
    "model": MODEL,
    "input": "Hi.",
    "max_output_tokens": 1,
    "temperature": 0,
    "background": True,
}
CHAT = {
    "model": MODEL,
    "messages": [{"role": "user", "content": "Hi."}],
    "max_tokens": 1,
    "temperature": 0,
}
MESSAGE = {"model": MODEL, "max_tokens": 1, "messages": [{"role": "user", "content": "Hi"}]}
BODIES = {
    "/v1/responses": CREATE,
    "/v1/chat/completions": CHAT,
    "/v1/messages": MESSAGE,
    "/v1/messages/count_tokens": MESSAGE,
    "/api/show": {"model": MODEL},
    "/v1/embeddings": {"model": MODEL, "input": "Hi."},
    "/api/embed": {"model": MODEL, "input": "Hi."},
    "/api/embeddings": {"model": MODEL, "prompt": "Hi."},
    "/api/chat": {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Hi."}],
        "stream": False,
        "options": {"num_predict": 1, "temperature": 0},
    },
    "/v1/completions": {"model": MODEL, "prompt": "Hi", "max_tokens": 1},
}


def _authorization(svc: Service, caller: str) -> str | None:
    return {
        "no token": None,
        "not bearer": "Basic dXNlcjpwYXNz",
        "not a token": "Bearer hunter2",
        "unknown token": "Bearer lmsp_" + "A" * 43,
    }.get(caller, f"Bearer {svc.tokens.get(caller, '')}")


def _expected(caller: str, scope: str | None, allowed: int, path: str) -> int:
    if scope is None:
        return allowed
    if caller in ("no token", "not bearer", "not a token", "unknown token", "revoked"):
        return 401
    held = {"owner": {"responses:read", "responses:write"}}.get(caller, {caller})
    if "admin" not in held and scope not in held:
        return 403
    if ("{task}" in path or "{chat}" in path) and caller not in ("owner", "admin"):
        return 404  # another client's task
    return allowed


def test_every_endpoint_answers_every_caller_as_the_scopes_say(
    svc: Service, owned_task: str, owned_chat: str
) -> None:
    wrong: list[str] = []
    checked = 0
    for method, template, scope, allowed in ENDPOINTS:
        path = template.replace("{task}", owned_task).replace("{chat}", owned_chat)
        if allowed == 0:
            allowed = svc.request(method, path, svc.tokens["admin"]).status
            assert allowed in (200, 404)
        for caller in CALLERS:
            answer = svc.request(
                method,
                path,
                body=BODIES.get(path) if method == "POST" else None,
                authorization=_authorization(svc, caller),
            )
            checked += 1
            expected = _expected(caller, scope, allowed, template)
            if answer.status != expected:
                wrong.append(f"{method} {template} as {caller}: {answer.status}, want {expected}")
            if answer.status >= 400 and template.startswith("/api/"):
                assert isinstance(answer.json()["error"], str), answer.body  # Ollama's shape
            elif answer.status >= 400:
                error = answer.json()["error"]
                assert error["message"] and error["code"], answer.body
                if answer.status == 401:
                    assert error["type"] == "authentication_error"
                if answer.status == 403:
                    assert error["code"] == "insufficient_scope"
    assert wrong == [], "\n".join(wrong)
    assert checked == len(ENDPOINTS) * len(CALLERS)


def test_another_clients_task_is_404_and_never_listed(
    svc: Service, owned_task: str, owned_chat: str
) -> None:
    other = svc.tokens["responses:read"]
    for path in (
        f"/v1/responses/{owned_task}",
        f"/v1/tasks/{owned_task}",
        f"/v1/tasks/{owned_task}/events",
        f"/v1/responses/{owned_task}?stream=true",
        f"/v1/responses/{owned_task}/input_items",
        f"/v1/chat/completions/{owned_chat}",
        f"/v1/tasks/{owned_chat}",
    ):
        answer = svc.request("GET", path, other)
        assert answer.status == 404, (path, answer.body)
        assert owned_task in answer.json()["error"]["message"] or owned_chat in path
    for method, path in (
        ("POST", f"/v1/responses/{owned_task}/cancel"),
        ("DELETE", f"/v1/responses/{owned_task}"),
        ("POST", f"/v1/tasks/{owned_task}/cancel"),
        ("DELETE", f"/v1/chat/completions/{owned_chat}"),
    ):
        assert svc.request(method, path, svc.tokens["responses:write"]).status == 404
    listed = svc.request("GET", "/v1/tasks?limit=100", other).json()["data"]
    assert owned_task not in {t["id"] for t in listed}
    assert owned_task in {
        t["id"]
        for t in svc.request("GET", "/v1/tasks?limit=100", svc.tokens["admin"]).json()["data"]
    }


# -- DNS rebinding, browsers, CORS ---------------------------------------------------------------
def test_a_foreign_host_header_is_refused_with_421(svc: Service, owned_task: str) -> None:
    for host in (
        "evil.example",
        f"evil.example:{svc.port}",
        f"127.0.0.1.evil.example:{svc.port}",
        f"localhost.:{svc.port}",
        f"127.0.0.1:{svc.port + 1}",
        "192.168.1.5",
    ):
        for method, path in (
            ("GET", "/v1/health"),
            ("GET", "/v1/models"),
            ("POST", "/v1/responses"),
            ("GET", f"/v1/tasks/{owned_task}"),
        ):
            answer = svc.request(
                method,
                path,
                svc.tokens["admin"],
                headers={"Host": host},
                body=CREATE if method == "POST" else None,
            )
            assert answer.status == 421, (host, path, answer.status)
            assert answer.json()["error"]["code"] == "misdirected_request"
    for host in (f"127.0.0.1:{svc.port}", f"localhost:{svc.port}"):
        assert svc.request("GET", "/v1/health", headers={"Host": host}).status == 200


def test_a_foreign_origin_is_refused_on_writes_and_streams(svc: Service, owned_task: str) -> None:
    owner = svc.tokens["owner"]
    for origin in ("https://evil.example", "null", f"http://127.0.0.1:{svc.port + 1}"):
        requests = [
            ("POST", "/v1/responses", CREATE, {}),
            ("POST", "/v1/chat/completions", {**CHAT, "stream": True}, {}),
            ("POST", f"/v1/tasks/{owned_task}/cancel", None, {}),
            ("POST", f"/v1/responses/{owned_task}/cancel", None, {}),
            ("DELETE", f"/v1/responses/{owned_task}", None, {}),
            ("GET", f"/v1/responses/{owned_task}?stream=true", None, {}),
            ("GET", f"/v1/tasks/{owned_task}/events", None, {"Accept": "text/event-stream"}),
            ("POST", "/v1/pairing", {"client_name": "drive-by"}, {}),
        ]
        for method, path, body, extra in requests:
            answer = svc.request(
                method, path, owner, body=body, headers={"Origin": origin, **extra}
            )
            assert answer.status == 403, (origin, method, path, answer.status)
            assert answer.json()["error"]["code"] == "origin_not_allowed"
            assert "Access-Control-Allow-Origin" not in answer.headers
    preflight = svc.request(
        "OPTIONS",
        "/v1/responses",
        headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"},
    )
    assert preflight.status >= 400
    assert "Access-Control-Allow-Origin" not in preflight.headers


def test_no_answer_ever_allows_every_origin(svc: Service) -> None:
    assert len(svc.seen_headers) > 100
    for headers in svc.seen_headers:
        for name, value in headers.items():
            if name.lower() == "access-control-allow-origin":
                assert value.strip() != "*", headers


# -- pairing brute force -------------------------------------------------------------------------
def test_the_sixth_pairing_attempt_fails_even_with_the_right_secret(svc: Service) -> None:
    started = svc.request(
        "POST", "/v1/pairing", body={"client_name": "brute", "scopes": ["models:read"]}
    )
    assert started.status == 200, started.body
    pairing = started.json()
    svc.issued.append(pairing["pairing_secret"])
    approved = lmsp("pairing", "approve", pairing["user_code"], data_dir=svc.data_dir)
    assert approved.returncode == 0, approved.stderr
    path = f"/v1/pairing/{pairing['pairing_id']}/token"
    for attempt in range(MAX_FAILURES):
        wrong = svc.request("POST", path, body={"pairing_secret": f"wrong-{attempt}"})
        assert wrong.status == 400, wrong.body
        assert wrong.json()["error"]["code"] == "invalid_grant"
    right = svc.request("POST", path, body={"pairing_secret": pairing["pairing_secret"]})
    assert right.status == 400, right.body
    assert right.json()["error"]["code"] == "access_denied"
    assert b"lmsp_" not in right.body


async def test_the_sixth_claim_attempt_fails_even_with_the_right_code(tmp_path: Path) -> None:
    import aiohttp

    async with running_core(tmp_path / "data") as core:
        claim = await core.pairing.create_claim_code(frozenset({"models:read"}))
        async with aiohttp.ClientSession(base_url=core.url) as http:
            for attempt in range(MAX_FAILURES):
                wrong = "BCDF-" + ["GHJK", "LMNP", "QRST", "VWXZ"][attempt % 4]
                async with http.post(
                    "/v1/pairing/claim", json={"code": wrong, "client_name": "brute"}
                ) as r:
                    assert r.status in (400, 404), await r.text()
            async with http.post(
                "/v1/pairing/claim", json={"code": claim["code"], "client_name": "brute"}
            ) as r:
                body = await r.text()
                assert r.status in (400, 404), body
                assert "lmsp_" not in body
        assert await token(core)  # the service itself is fine


# -- model ids that try to leave the model folders -----------------------------------------------
TRAVERSALS = [
    "../x",
    "../../etc/passwd",
    "/etc/passwd",
    "%2e%2e",
    "%2e%2e%2fx",
    "..",
    ".",
    "a\x00b",
    "\x00",
    "..\\x",
    "C:\\Windows\\win.ini",
    "~/x",
    "sha256:" + "0" * 64,
    "sha256-" + "0" * 64,
    "smollm2-135m-instruct/../x",
    "smollm2-135m-instruct\x00",
    "../outside",
    "outside.gguf",
]


def test_model_ids_never_reach_a_file_outside_the_model_folders(svc: Service) -> None:
    outside = svc.data_dir.parent / "outside.gguf"
    outside.write_bytes(Path(_demo_path(svc)).read_bytes()[: 1 << 20])  # a GGUF-looking file
    admin = svc.tokens["admin"]
    before = svc.request("GET", "/v1/tasks?limit=100", admin).json()["data"]
    for model_id in TRAVERSALS:
        answer = svc.request(
            "POST",
            "/v1/responses",
            admin,
            {"model": model_id, "input": "x", "max_output_tokens": 1},
        )
        assert answer.status == 404, (model_id, answer.status, answer.body)
        error = answer.json()["error"]
        assert (error["code"], error["param"]) == ("model_not_found", "model"), model_id
        for path in (
            f"/v1/models/{quote(model_id, safe='')}",
            f"/v1/models/{quote(model_id, safe='%')}",
        ):
            got = svc.request("GET", path, admin)
            assert got.status == 404, (path, got.status)
            assert got.json()["error"]["code"] in ("model_not_found", "unknown_route"), path
    after = svc.request("GET", "/v1/tasks?limit=100", admin).json()["data"]
    assert len(after) == len(before), "a request for a foreign model became a task"
    ids = {m["id"] for m in svc.request("GET", "/v1/models", admin).json()["data"]}
    assert ids == {MODEL}


def _demo_path(svc: Service) -> str:
    import sqlite3

    conn = sqlite3.connect(f"file:{svc.data_dir / 'lmsp.db'}?mode=ro", uri=True)
    try:
        return str(conn.execute("SELECT path FROM models WHERE id=?", (MODEL,)).fetchone()[0])
    finally:
        conn.close()


# -- files ---------------------------------------------------------------------------------------
def test_the_data_directory_is_0700_and_the_database_files_0600(svc: Service) -> None:
    assert stat.S_IMODE(svc.data_dir.stat().st_mode) == 0o700
    files = [svc.data_dir / name for name in ("lmsp.db", "lmsp.db-wal", "lmsp.db-shm")]
    assert all(f.exists() for f in files), [f.name for f in files if not f.exists()]
    for path in [*files, svc.data_dir / "lmsp.lock"]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, (path, oct(path.stat().st_mode))
    logs = svc.data_dir / "logs"
    assert stat.S_IMODE(logs.stat().st_mode) & 0o077 == 0, oct(logs.stat().st_mode)


# -- last: no plaintext token anywhere -----------------------------------------------------------
def _leaks(svc: Service) -> list[str]:
    places = [p for p in svc.data_dir.rglob("*") if p.is_file()]
    places.append(svc.server.stderr_path)
    found = []
    for place in places:
        raw = place.read_bytes()
        for secret in svc.issued:
            for needle in {secret, secret.removeprefix("lmsp_")}:
                if needle.encode() in raw:
                    found.append(f"{place.name} holds {needle[:9]}…")
    return found


def test_no_issued_token_is_stored_in_plaintext(svc: Service) -> None:
    assert len(svc.issued) >= 7
    # Every token was used at least once, so it went through authentication and logging.
    assert _leaks(svc) == []
    assert svc.server.terminate() == 0  # the WAL is checkpointed into the main file
    assert _leaks(svc) == []
    assert any(re.search(rb"lmsp_\w{4}", p.read_bytes()) for p in [svc.data_dir / "lmsp.db"]), (
        "the non-secret display prefixes should be there: the grep would see a token"
    )
