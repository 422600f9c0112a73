"""Every request body read, bounded and checked before a route validates it.

A route that declares a body lets Litestar read it, decode it and validate it on the event
loop. Three things go wrong there with hostile or broken clients, and this middleware stops
each before the route runs:

* a body that never finishes arriving held its connection open forever: the whole body must
  arrive within ``request_body_seconds`` (408 otherwise);
* a client that leaves mid-upload surfaced as Litestar's 500 "client disconnected", logged at
  ERROR: it is dropped quietly (the metrics middleware counts a 499);
* a big body's decode and validation stalled every other request: a body of
  ``OFFLOAD_BYTES`` or more has its shape bounded (``gateway.protocol.bounds``) on the
  guard's own worker thread, slice by slice, without building it (``body_shape``); out of
  bounds it is a 400 without ever reaching the loop's decoder and validator.

The body, once read, is replayed to the route; later ``receive`` calls (disconnect
detection of a stream) go to the server as before.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from litestar.middleware import ASGIMiddleware
from litestar.types import ASGIApp, Receive, ReceiveMessage, Scope, Send

from gateway.errors import InvalidRequestError, RequestTimeoutError, RequestTooLargeError
from gateway.protocol.bounds import ShapeError
from gateway.routes.body_shape import check_body_shape

# Below this a body decodes and validates in well under a millisecond: not worth a thread.
OFFLOAD_BYTES = 64 * 1024
_WITH_BODY = frozenset({"POST", "PUT", "PATCH"})


class _ClientGone(Exception):
    """The client disconnected before its body had arrived."""


class BodyGuardMiddleware(ASGIMiddleware):
    """Reads each request body within a deadline and a size, then bounds its shape."""

    def __init__(self, max_bytes: int, timeout_seconds: float) -> None:
        self.max_bytes = max_bytes
        self.timeout = timeout_seconds
        # One thread of its own, one check at a time, the loop's turn between two. Checks
        # hold the GIL in turns anyway: more threads would only add holders for the loop to
        # wait behind. A thread handed the next body at once re-takes the GIL before the loop
        # can (8 queued 40,000-message bodies: the loop's worst wait 22-31 ms; one at a time
        # 7-11 ms, as with no check at all). And a flood of big bodies queues here, not in
        # the default executor that the routes' own work uses.
        self._checker: ThreadPoolExecutor | None = None
        self._one_at_a_time = asyncio.Lock()

    async def handle(self, scope: Scope, receive: Receive, send: Send, next_app: ASGIApp) -> None:
        if scope["type"] != "http" or scope.get("method") not in _WITH_BODY:
            await next_app(scope, receive, send)
            return
        try:
            body = await asyncio.wait_for(self._read(receive), self.timeout)
        except TimeoutError:
            raise RequestTimeoutError(
                f"the request's body did not arrive within {self.timeout:g} s"
            ) from None
        except _ClientGone:
            return  # nobody to answer
        if len(body) >= OFFLOAD_BYTES:
            await self._check_shape(body)
        await next_app(scope, _replay(body, receive), send)

    async def _read(self, receive: Receive) -> bytes:
        parts: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _ClientGone()
            chunk: bytes = message.get("body", b"")  # type: ignore[assignment]
            size += len(chunk)
            if size > self.max_bytes:
                raise RequestTooLargeError(
                    f"the body exceeds {self.max_bytes} bytes (max_request_bytes)"
                )
            parts.append(chunk)
            if not message.get("more_body", False):
                return b"".join(parts)

    async def _check_shape(self, body: bytes) -> None:
        if self._checker is None:  # made on first use; its idle thread ends with the app
            self._checker = ThreadPoolExecutor(1, thread_name_prefix="body-guard")
        loop = asyncio.get_running_loop()
        try:
            async with self._one_at_a_time:
                await loop.run_in_executor(self._checker, check_body_shape, body)
        except ShapeError as exc:
            raise InvalidRequestError(str(exc), param=exc.param, code="invalid_value") from None


def _replay(body: bytes, receive: Receive) -> Receive:
    delivered = False

    async def replayed() -> ReceiveMessage:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}  # type: ignore[return-value]
        return await receive()

    return replayed
