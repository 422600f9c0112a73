"""Server-Sent Events responses (sse-starlette: keep-alive pings, disconnect detection).

OpenAI's streams end with ``data: [DONE]`` after the last model, or, when something fails
after the 200 was sent, an error envelope as the last event. Anthropic's streams (and the
peers' ticket streams) name each event after its ``type`` and have no ``[DONE]``; a failure
is an ``error`` event.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing
from typing import Any, Literal

from litestar import Response
from pydantic import BaseModel
from sse_starlette import EventSourceResponse

from gateway.errors import GatewayError, ShuttingDownError
from gateway.protocol.peer import TicketError
from gateway.routes.errors import anthropic_error_body, gateway_error_body

SSE_PING_SECONDS = 10


class ServerSentEvents(Response[Any]):
    """Hands an sse-starlette stream to Litestar as this handler's response."""

    def __init__(
        self,
        models: AsyncGenerator[BaseModel, None],
        dialect: Literal["openai", "anthropic", "peer"] = "openai",
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(content=None, media_type="text/event-stream")
        if dialect == "openai":
            events = _events(models)
        else:
            body = _anthropic_error if dialect == "anthropic" else _peer_error
            events = _named_events(models, body)
        self.stream = EventSourceResponse(events, ping=SSE_PING_SECONDS, headers=headers)

    def to_asgi_response(self, *args: Any, **kwargs: Any) -> Any:
        return self.stream


async def _events(models: AsyncGenerator[BaseModel, None]) -> AsyncIterator[dict[str, str]]:
    try:
        async with aclosing(models) as stream:
            async for model in stream:
                yield {"data": model.model_dump_json()}
    except GatewayError as exc:  # after the 200 was sent: report inside the stream
        yield {"data": gateway_error_body(exc).model_dump_json()}
        if not isinstance(exc, ShuttingDownError):
            return
        # Stopped by a shutdown: the stream itself is complete, and says so.
    yield {"data": "[DONE]"}


def _anthropic_error(exc: GatewayError) -> BaseModel:
    return anthropic_error_body(exc.status_code, exc.message)


def _peer_error(exc: GatewayError) -> BaseModel:
    return TicketError(status=exc.status_code, message=exc.message)


async def _named_events(
    models: AsyncGenerator[BaseModel, None], error_body: Callable[[GatewayError], BaseModel]
) -> AsyncIterator[dict[str, str]]:
    try:
        async with aclosing(models) as stream:
            async for model in stream:
                yield {
                    "event": str(getattr(model, "type", "message")),
                    "data": model.model_dump_json(),
                }
    except GatewayError as exc:
        yield {"event": "error", "data": error_body(exc).model_dump_json()}
