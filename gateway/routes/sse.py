"""Server-Sent Events responses, on Litestar's own ``ServerSentEvent`` (which also stops the
stream when the client disconnects).

OpenAI's streams end with ``data: [DONE]`` after the last model, or, when something fails
after the 200 was sent, an error envelope as the last event. Anthropic's streams (and the
peers' ticket streams, and OpenAI's Responses streams) name each event after its ``type``
and have no ``[DONE]``; a failure is an ``error`` event.

Events that are ready together (the model ran ahead of the writer) go out in one write: each
framed as its own message, their bytes joined (``ready_batches``); the bytes on the wire are
the same, only fewer writes carry them. While nothing comes for ``SSE_PING_SECONDS`` (a
queued request, a long prefill, a paused background job), a comment keeps the connection
alive through proxies and clients' read timeouts.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, Literal

from litestar.response import ServerSentEvent
from litestar.response.sse import ServerSentEventMessage
from pydantic import BaseModel

from gateway.errors import GatewayError, ShuttingDownError
from gateway.protocol.peer import TicketError
from gateway.protocol.responses_events import (
    ResponseCreatedEvent,
    ResponseErrorEvent,
    ResponseInProgressEvent,
)
from gateway.routes.batching import ready_batches
from gateway.routes.errors import anthropic_error_body, gateway_error_body

log = logging.getLogger(__name__)

# How a stream frames its events: OpenAI's ``data:`` lines ending with ``[DONE]``, or events
# named by their type (Anthropic's, the peers', the Responses API's).
Dialect = Literal["openai", "anthropic", "peer", "responses"]

SSE_PING_SECONDS = 10.0
PING = ServerSentEventMessage(comment="ping", data=None)


@dataclass
class _Framed(ServerSentEventMessage):
    """Messages already framed (several events ready together): sent as they are."""

    frames: bytes = b""

    def encode(self) -> bytes:
        return self.frames


class ServerSentEvents(ServerSentEvent):
    """A handler's stream of protocol models as Server-Sent Events in one of the dialects."""

    def __init__(
        self,
        models: AsyncGenerator[BaseModel, None],
        dialect: Dialect = "openai",
        headers: dict[str, str] | None = None,
        event_ids: Callable[[str, str], str] | None = None,
    ) -> None:
        """``event_ids``: named dialects only; each event's ``id`` from its name and data (the
        peers sign their answers this way)."""
        if dialect == "openai":
            events = _events(models)
        elif dialect == "responses":
            events = _named_events(models, _responses_error, event_ids, _ResponsesWire())
        else:
            body = _anthropic_error if dialect == "anthropic" else _peer_error
            events = _named_events(models, body, event_ids)
        # no-store: a stream is one answer, never to be replayed from a cache.
        super().__init__(events, headers={"Cache-Control": "no-store", **(headers or {})})


def _framed(data: str, event: str | None = None, event_id: str | None = None) -> bytes:
    return ServerSentEventMessage(data=data, event=event, id=event_id).encode()


def _batches(
    models: AsyncGenerator[BaseModel, None],
) -> AsyncGenerator[list[BaseModel], None]:
    return ready_batches(models, ping_every=SSE_PING_SECONDS)


async def _events(
    models: AsyncGenerator[BaseModel, None],
) -> AsyncIterator[ServerSentEventMessage | dict[str, str]]:
    try:
        async with aclosing(models) as stream, aclosing(_batches(stream)) as batches:
            async for batch in batches:
                if not batch:
                    yield PING
                    continue
                yield _Framed(frames=b"".join(_framed(m.model_dump_json()) for m in batch))
    except GatewayError as exc:  # after the 200 was sent: report inside the stream
        yield {"data": gateway_error_body(exc).model_dump_json()}
        if not isinstance(exc, ShuttingDownError):
            return
        # Stopped by a shutdown: the stream itself is complete, and says so.
    except Exception as exc:  # a bug or an engine failure: never a silently cut stream
        yield {"data": gateway_error_body(_unexpected(exc)).model_dump_json()}
    yield {"data": "[DONE]"}


def _unexpected(exc: Exception) -> GatewayError:
    """A failure that is not the gateway's own, logged in full and told as a bare 500."""
    log.error("stream failed after the 200 was sent", exc_info=exc)
    return GatewayError("The server had an error while processing your request.")


def _anthropic_error(exc: GatewayError) -> BaseModel:
    return anthropic_error_body(exc.status_code, exc.message, exc.code)


def _responses_error(exc: GatewayError) -> BaseModel:
    # (The Responses stream reports its own failures, numbered; this is the last resort.)
    return ResponseErrorEvent(
        sequence_number=0, code=exc.code, message=exc.message, param=exc.param
    )


def _peer_error(exc: GatewayError) -> BaseModel:
    return TicketError(status=exc.status_code, message=exc.message)


class _ResponsesWire:
    """The Responses dialect on the wire: each event's ``sequence_number`` is its place in
    the stream (the service's own numbers are replaced), and a keep-alive is a
    ``response.in_progress`` event rather than a comment: agents' clients (Codex CLI) count
    only events against their idle timeout, and a long prefill would outlast it."""

    def __init__(self) -> None:
        self.sequence = 0
        self.response: Any = None  # the last lifecycle event's response: the keep-alive's

    def number(self, model: BaseModel) -> BaseModel:
        if isinstance(model, ResponseCreatedEvent | ResponseInProgressEvent):
            self.response = model.response
        if hasattr(model, "sequence_number"):
            model = model.model_copy(update={"sequence_number": self.sequence})
            self.sequence += 1
        return model

    def keepalive(self) -> BaseModel | None:
        if self.response is None:
            return None
        # Numbered as it is sent, as every event.
        return ResponseInProgressEvent(sequence_number=0, response=self.response)


async def _named_events(
    models: AsyncGenerator[BaseModel, None],
    error_body: Callable[[GatewayError], BaseModel],
    event_ids: Callable[[str, str], str] | None = None,
    wire: _ResponsesWire | None = None,
) -> AsyncIterator[ServerSentEventMessage]:
    def framed(model: BaseModel, name: str | None = None) -> bytes:
        if wire is not None:
            model = wire.number(model)
        name = name or str(getattr(model, "type", "message"))
        data = model.model_dump_json()
        return _framed(data, name, event_ids(name, data) if event_ids else None)

    try:
        async with aclosing(models) as stream, aclosing(_batches(stream)) as batches:
            async for batch in batches:
                keepalive = wire.keepalive() if wire is not None and not batch else None
                if keepalive is not None:
                    batch = [keepalive]
                if not batch:
                    yield PING
                    continue
                yield _Framed(frames=b"".join(framed(model) for model in batch))
    except GatewayError as exc:
        yield _Framed(frames=framed(error_body(exc), "error"))
    except Exception as exc:  # never a silently cut stream
        yield _Framed(frames=framed(error_body(_unexpected(exc)), "error"))
