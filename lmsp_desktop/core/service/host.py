"""Hosting the service on whatever asyncio loop runs (plain asyncio or qasync's Qt loop)."""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import logging
import os
import socket
import sys

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger

from lmsp_desktop.core.api.answering import TASK_ID
from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.service.app import build_app
from lmsp_desktop.core.service.context import PRINCIPAL, ServiceContext

log = logging.getLogger(__name__)
# One line per answered request at DEBUG (--log-level DEBUG), as llama-server's and
# OLLAMA_DEBUG's request logs: what a client asked, what it got, how long it took.
requests_log = logging.getLogger("lmsp_desktop.requests")
BACKLOG = 128  # aiohttp's default for a site


class RequestLine(AbstractAccessLogger):
    """`POST /v1/responses 200 12 ms client=NAME task=ID`: the path as sent (still
    percent-encoded: a `%0A` in it cannot start a line of its own) without its query, the
    client by its name (never its token: a 401's is `-`), and the task the request created,
    as its route recorded it or its answer's Location names it. Given to aiohttp only when
    the service starts at DEBUG: at INFO requests pay nothing for it."""

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        caller = request.get(PRINCIPAL)
        task = request.get(TASK_ID)
        if task is None and "Location" in response.headers:
            task = response.headers["Location"].rsplit("/", 1)[-1]
        self.logger.debug(
            "%s %s %s %.0f ms client=%s%s",
            request.method,
            request.rel_url.raw_path,
            response.status,
            time * 1000,
            caller.name if caller is not None else "-",
            f" task={task}" if task else "",
        )


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class Listener:
    """The service's listening sockets (one per address the host names: `localhost` may
    name 127.0.0.1 and ::1), bound and listening before the start writes anything (Core.open),
    so that a port another program holds fails the start while the store is still as it
    was, and no program can take the port meanwhile. Nothing accepts their connections until
    ServiceHost.start serves on them: a client connecting before that waits in the backlog
    and is answered once the start is done (or reset if it fails), never before recovery."""

    def __init__(self, host: str, sockets: list[socket.socket]) -> None:
        self.host = host
        self.sockets = sockets
        self.port: int = sockets[0].getsockname()[1]  # port 0: the one the system chose

    @property
    def url(self) -> str:
        shown = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{shown}:{self.port}"

    def close(self) -> None:
        """Close the sockets (again: a no-op once the service has closed them)."""
        for sock in self.sockets:
            sock.close()


async def listen(host: str, port: int) -> Listener:
    """The one way the service binds its port: every address `host` names, as aiohttp's
    TCPSite does through asyncio (SO_REUSEADDR on POSIX, IPv6 sockets IPv6-only), and listen
    at once. Listening is what keeps the port: Linux lets a second SO_REUSEADDR socket (that
    of `python3 -m http.server`, say) bind a port that is bound but not listened on, and the
    first one's listen() then fails. A port in use or an address that cannot be bound is an
    LmspError saying what to do."""
    if not is_loopback(host):
        log.warning("serving on %s: reachable from other machines (explicit opt-in)", host)
    try:
        sockets = await _bind(host, port)
    except OSError as exc:
        raise _cannot_listen(host, port, exc) from exc
    return Listener(host, sockets)


async def _bind(host: str, port: int) -> list[socket.socket]:
    infos = await asyncio.get_running_loop().getaddrinfo(
        host or None,
        port,
        family=socket.AF_UNSPEC,
        type=socket.SOCK_STREAM,
        flags=socket.AI_PASSIVE,
    )
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _name, address in dict.fromkeys(infos):
            try:
                sock = socket.socket(family, kind, proto)
            except OSError:  # a family this machine lacks (IPv6 off): as asyncio, skip it
                continue
            sockets.append(sock)
            if os.name == "posix" and sys.platform != "cygwin":  # asyncio's default
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, True)
            if family == socket.AF_INET6 and hasattr(socket, "IPPROTO_IPV6"):
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, True)
            try:
                sock.bind(address)
                sock.listen(BACKLOG)
            except OSError as err:
                raise OSError(
                    err.errno,
                    f"error while attempting to bind on address {address!r}: "
                    f"{(err.strerror or str(err)).lower()}",
                ) from None
            sock.setblocking(False)
        if not sockets:
            raise OSError(errno.EADDRNOTAVAIL, f"no address to listen on for {host!r}")
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def _cannot_listen(host: str, port: int, exc: OSError) -> LmspError:
    if exc.errno == errno.EADDRINUSE:
        return LmspError(
            # Nothing runs yet, the window's Settings included: the one way to another port
            # now is the flag (a GUI walk found "or Settings" it could not reach).
            f"Port {port} on {host} is in use by another program. Stop the other program, "
            "or choose another port: start with --port N (or --port 0 for any free one).",
            code="port_in_use",
            status=503,
        )
    return LmspError(
        f"Cannot listen on {host}:{port} ({exc.strerror}). Check the address.",
        code="cannot_listen",
        status=503,
    )


class ServiceHost:
    """Serves the aiohttp app with AppRunner/SockSite on the sockets `listen` bound at the
    start's beginning; never owns a loop."""

    def __init__(self, ctx: ServiceContext, listener: Listener) -> None:
        self.ctx = ctx
        self.listener = listener
        self.app = build_app(ctx)
        self.app.on_shutdown.append(self._end_streams)
        self._runner: web.AppRunner | None = None
        self.port = 0

    async def start(self) -> str:
        """Accept on the listener's sockets: from here on requests are answered."""
        # Whether to log requests is decided here, once: nothing per request at INFO.
        logged = requests_log.isEnabledFor(logging.DEBUG)
        self._runner = web.AppRunner(
            self.app,
            shutdown_timeout=3.0,
            access_log=requests_log if logged else None,
            access_log_class=RequestLine,
        )
        await self._runner.setup()
        try:
            for sock in self.listener.sockets:
                await web.SockSite(self._runner, sock, backlog=BACKLOG).start()
        except OSError as exc:
            await self._runner.cleanup()
            self._runner = None
            self.listener.close()
            raise _cannot_listen(self.listener.host, self.listener.port, exc) from exc
        self.port = self.ctx.port = self.listener.port
        self.ctx.url = self.listener.url
        return self.ctx.url

    async def _end_streams(self, app: web.Application) -> None:
        self.ctx.follower.close()

    async def stop(self) -> None:
        self.ctx.shutting_down = True
        if self._runner is not None:
            server = self._runner.server
            transports = [c.transport for c in server.connections] if server is not None else []
            await self._runner.cleanup()
            self._runner = None
            if server is not None:  # and any made while the cleanup ran
                transports += [c.transport for c in server.connections]
            # The cleanup closes each connection gently (transport.close() waits until the
            # answers still buffered are sent): one whose client stopped reading would keep
            # its socket open after this returns, and past the loop's end (a leaked socket).
            # abort() drops the buffer (a no-op on a transport already closed), and the
            # sleep lets its connection_lost, which closes the socket, run before we return.
            for transport in transports:
                if transport is not None:
                    transport.abort()
            await asyncio.sleep(0)
        self.listener.close()  # the cleanup closed those it served on; none if it never did
