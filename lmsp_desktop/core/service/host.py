"""Hosting the service on whatever asyncio loop runs (plain asyncio or qasync's Qt loop)."""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import logging

from aiohttp import web

from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.service.app import build_app
from lmsp_desktop.core.service.context import ServiceContext

log = logging.getLogger(__name__)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class ServiceHost:
    """Starts and stops the aiohttp site with AppRunner/TCPSite; never owns a loop."""

    def __init__(self, ctx: ServiceContext) -> None:
        self.ctx = ctx
        self.app = build_app(ctx)
        self.app.on_shutdown.append(self._end_streams)
        self._runner: web.AppRunner | None = None
        self.port = 0

    async def start(self) -> str:
        host, port = self.ctx.settings.host, self.ctx.settings.port
        if not is_loopback(host):
            log.warning("serving on %s: reachable from other machines (explicit opt-in)", host)
        self._runner = web.AppRunner(self.app, shutdown_timeout=3.0, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        try:
            await site.start()
        except OSError as exc:
            await self._runner.cleanup()
            if exc.errno == errno.EADDRINUSE:
                raise LmspError(
                    f"Port {port} on {host} is in use by another program. Choose another port "
                    "(--port, or Settings), or stop the other program.",
                    code="port_in_use",
                    status=503,
                ) from exc
            raise LmspError(
                f"Cannot listen on {host}:{port} ({exc.strerror}). Check the address.",
                code="cannot_listen",
                status=503,
            ) from exc
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1] if sockets else port
        self.ctx.port = self.port
        shown = f"[{host}]" if ":" in host else host
        self.ctx.url = f"http://{shown}:{self.port}"
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
