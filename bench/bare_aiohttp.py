"""B1's ceiling for any aiohttp service: a bare aiohttp app on the loop `serve` runs on,
whose one route reads the body and answers a fixed 202 (no middleware, no store).

    python -m bench.bare_aiohttp --data-dir D --port P

Prints one JSON line once it listens (as bench.server does) and stops on SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal

from aiohttp import web

from lmsp_desktop import service_loop

# What the service's 202 looks like, in size and headers (B1's create answers ~700 bytes).
BODY = json.dumps({"id": "resp_" + "0" * 32, "object": "response", "pad": "x" * 600}).encode()


async def accepted(request: web.Request) -> web.Response:
    await request.read()  # every server reads the body it was sent
    return web.Response(
        body=BODY, status=202, content_type="application/json", headers={"Location": "/x"}
    )


async def models(request: web.Request) -> web.Response:
    return web.json_response({"object": "list", "data": [{"id": "bare"}]})


async def main(port: int) -> None:
    app = web.Application()
    app.router.add_post("/v1/responses", accepted)
    app.router.add_get("/v1/models", models)
    runner = web.AppRunner(app, access_log=None)  # as serve's (core/service/host.py)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    service_loop.settle_collector()  # as serve does once it listens
    print(json.dumps({"url": f"http://127.0.0.1:{port}", "token": ""}), flush=True)
    await stop.wait()
    await runner.cleanup()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.bare_aiohttp")
    parser.add_argument("--data-dir", required=True)  # unused: BenchServer passes one
    parser.add_argument("--port", type=int, required=True)
    service_loop.run(main(parser.parse_args().port))
