"""The plumbing the small HTTP fakes share: serve on 127.0.0.1 at a free port, fail on demand."""

from __future__ import annotations

from typing import Self

from aiohttp import web


async def serve_on_loopback(app: web.Application) -> tuple[web.AppRunner, str]:
    """Start `app`; returns its runner (to clean up) and its base URL, http://127.0.0.1:<port>."""
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]  # the one site's (host, port)
    return runner, f"http://127.0.0.1:{port}"


class LoopbackFake:
    """An async context manager serving `routes()` on loopback; `url` is its base URL."""

    url: str = ""
    _runner: web.AppRunner | None = None
    _fail_next: int = 0

    def routes(self, app: web.Application) -> None:
        raise NotImplementedError

    def fail_next(self, times: int) -> None:
        """Answer the next `times` requests with the service's HTTP 500."""
        self._fail_next = times

    def take_failure(self) -> bool:
        if self._fail_next:
            self._fail_next -= 1
            return True
        return False

    async def __aenter__(self) -> Self:
        app = web.Application()
        self.routes(app)
        self._runner, self.url = await serve_on_loopback(app)
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()
