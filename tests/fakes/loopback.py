"""Serve an aiohttp app on 127.0.0.1 at a free port, for the platform fakes."""

from __future__ import annotations

from aiohttp import web


async def serve_on_loopback(app: web.Application) -> tuple[web.AppRunner, str]:
    """Start `app`; returns its runner (to clean up) and its base URL, http://127.0.0.1:<port>."""
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}"
