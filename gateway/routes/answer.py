"""One way every route answers: prepare and start the work while the client is there (a
client that leaves first gets its work cancelled and a 499), then answer JSON or a stream of
Server-Sent Events. vLLM's ``with_cancellation`` does the same for its routes.

A route tells ``answer`` how its requests run through a ``WireFormat``: ``prepare`` (checks
and rendering, whose refusals keep their status), ``start`` (the slot, or a peer's seat),
then the whole answer (``complete``) or its events (``stream``). A format whose streams open
at once, before their start, is an ``OpensEarly`` (see ``gateway.routes.opening``).
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, Callable, Sequence
from typing import Any, ClassVar, Generic, TypeVar

from litestar import Request, Response
from pydantic import BaseModel

from gateway.errors import GatewayError
from gateway.routes.disconnect import ClientDisconnected, unless_disconnected
from gateway.routes.opening import begin_within_grace, opened, ready
from gateway.routes.request_metrics import CLIENT_CLOSED_REQUEST
from gateway.routes.sse import Dialect, ServerSentEvents
from gateway.serving.chat import ChatRun, StreamHead

Req = TypeVar("Req")  # the request body, as validated
Prep = TypeVar("Prep")  # the request prepared: checked, rendered, not yet started
Run = TypeVar("Run")  # the request started: its answer being computed


class WireFormat(ABC, Generic[Req, Prep, Run]):
    """How one route's requests run, for ``answer``."""

    dialect: ClassVar[Dialect] = "openai"  # of its streams

    @abstractmethod
    async def prepare(self, data: Req) -> Prep:
        """Check and render the request (a refusal raises, with its status)."""

    @abstractmethod
    async def start(self, prepared: Prep) -> Run:
        """Start the prepared request (a refusal raises: 429, 503...)."""

    @abstractmethod
    async def complete(self, data: Req, run: Run) -> BaseModel:
        """The whole answer, once it is ready."""

    def stream(self, data: Req, run: Run) -> AsyncGenerator[BaseModel, None]:
        """The answer's events, as it is computed."""
        raise NotImplementedError(f"{type(self).__name__} does not stream")

    def headers(self, run: Run | None) -> dict[str, str]:
        """Headers of the answer (``run`` None: a stream opened before its start)."""
        return {}

    def event_ids(self) -> Callable[[str, str], str] | None:
        """Each streamed event's ``id`` from its name and data (named dialects only)."""
        return None

    def respond(self, run: Run, body: BaseModel) -> Response[Any]:
        """The whole answer as an HTTP response."""
        return Response(body, headers=self.headers(run))


class OpensEarly(WireFormat[Req, Prep, Run]):
    """A wire format whose streams answer at once: the 200 and the opening events go out
    while the start may still wait (a long prompt, a queue), and the rest follows."""

    @abstractmethod
    def head(self, data: Req) -> StreamHead:
        """What the opening events name before the request is prepared."""

    @abstractmethod
    async def begin(self, data: Req, head: StreamHead) -> Run:
        """Prepare and start the request under ``head``."""

    @abstractmethod
    def opening(self, data: Req, head: StreamHead, run: Run | None) -> Sequence[BaseModel]:
        """The opening events (``run``: the start, if it was ready within the grace)."""

    @abstractmethod
    def rest(self, data: Req, run: Run) -> AsyncGenerator[BaseModel, None]:
        """The events after the opening ones."""

    @abstractmethod
    async def abandon(self, run: Run) -> None:
        """Release a started run nobody will read."""

    def failed(
        self, data: Req, head: StreamHead
    ) -> Callable[[GatewayError], Sequence[BaseModel]] | None:
        """The events that end a stream whose start failed (None: the dialect's error)."""
        return None


async def answer(
    request: Request[Any, Any, Any], fmt: WireFormat[Req, Prep, Run], data: Req, stream: bool
) -> Response[Any]:
    """Run ``data`` through ``fmt`` for ``request``: JSON, or Server-Sent Events when
    ``stream``; a 499 when the client left before its answer."""
    try:
        if stream and isinstance(fmt, OpensEarly):
            return await _open_early(request, fmt, data)
        prepared = await fmt.prepare(data)
        run = await unless_disconnected(request, fmt.start(prepared))
        if stream:
            events = fmt.stream(data, run)
            return ServerSentEvents(
                events, fmt.dialect, headers=fmt.headers(run), event_ids=fmt.event_ids()
            )
        body = await unless_disconnected(request, fmt.complete(data, run))
    except ClientDisconnected:
        # Nobody is listening any more; 499 is what nginx logs for this.
        return Response(content=None, status_code=CLIENT_CLOSED_REQUEST)
    return fmt.respond(run, body)


async def _open_early(
    request: Request[Any, Any, Any], fmt: OpensEarly[Req, Prep, Run], data: Req
) -> Response[Any]:
    head = fmt.head(data)
    begun = await begin_within_grace(request, fmt.begin(data, head))
    run = ready(begun)
    rest = functools.partial(fmt.rest, data)
    events = opened(fmt.opening(data, head, run), begun, rest, fmt.abandon, fmt.failed(data, head))
    return ServerSentEvents(events, fmt.dialect, headers=fmt.headers(run))


def served_by(run: ChatRun | None) -> dict[str, str]:
    """``X-Gateway-Peer``: the peer that computed the answer (none: this node did, or a
    stream opened before its start said)."""
    node = run.started.node if run is not None else None
    return {"X-Gateway-Peer": node} if node else {}
