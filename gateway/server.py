"""uvicorn with a drain before it stops.

uvicorn alone, on SIGTERM, stops listening and gives open connections a few seconds before
cutting them. The gateway first drains (``gateway.app.drain``, ``Services.drain``: new
requests 503, waiting jobs 503, running generations finish within the grace period or end
with a proper last event), and only then lets uvicorn shut down. A second signal stops at once.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from types import FrameType

import uvicorn

from gateway.profiling import ThreadSampler


class GatewayServer(uvicorn.Server):
    def __init__(
        self,
        config: uvicorn.Config,
        drain: Callable[[], Awaitable[None]],
        profiles: ThreadSampler | None = None,
    ) -> None:
        super().__init__(config)
        self._drain = drain
        self._draining: asyncio.Task[None] | None = None
        self._profiles = profiles  # GATEWAY_PROFILE_DIR: what serving costs, per thread

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self._profiles is not None:
            self._profiles.start()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        await super().shutdown(sockets)
        if self._profiles is not None:  # before uvicorn raises the stopping signal again
            self._profiles.finish()

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self._draining is not None or self.should_exit:
            super().handle_exit(sig, frame)  # asked again: stop now
            return
        # A signal handler runs on the main thread, where uvicorn's loop runs.
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not serving yet: nothing to drain
            super().handle_exit(sig, frame)
            return
        self._draining = loop.create_task(self._drain_then_exit(sig, frame))

    async def _drain_then_exit(self, sig: int, frame: FrameType | None) -> None:
        try:
            await self._drain()
        finally:
            super().handle_exit(sig, frame)
