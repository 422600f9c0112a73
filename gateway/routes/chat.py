"""``POST /v1/chat/completions``: validate, hand to the chat service, answer JSON or SSE."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Annotated, Any

from litestar import Controller, Request, Response, post
from litestar.di import NamedDependency
from litestar.params import HeaderParameter, JSONBody
from sse_starlette import EventSourceResponse

from gateway.errors import GatewayError
from gateway.protocol.openai import ChatCompletionRequest
from gateway.routes.disconnect import ClientDisconnected, unless_disconnected
from gateway.routes.errors import ERROR_RESPONSES, gateway_error_body
from gateway.serving.chat import ChatRun, ChatService

SSE_PING_SECONDS = 10


class ServerSentEvents(Response[Any]):
    """Hands an sse-starlette stream to Litestar as this handler's response."""

    def __init__(self, stream: EventSourceResponse) -> None:
        super().__init__(content=None, media_type="text/event-stream")
        self.stream = stream

    def to_asgi_response(self, *args: Any, **kwargs: Any) -> Any:
        return self.stream


def _sse_events(service: ChatService, run: ChatRun) -> AsyncIterator[dict[str, str]]:
    async def events() -> AsyncIterator[dict[str, str]]:
        try:
            async with aclosing(service.stream(run)) as chunks:
                async for chunk in chunks:
                    yield {"data": chunk.model_dump_json()}
        except GatewayError as exc:  # after the 200 was sent: report inside the stream
            yield {"data": gateway_error_body(exc).model_dump_json()}
            return
        yield {"data": "[DONE]"}

    return events()


class ChatController(Controller):
    path = "/v1/chat/completions"
    tags = ["OpenAI"]

    @post(
        "",
        summary="Create a chat completion",
        description=(
            "OpenAI's chat completions. With `stream: true` the answer is a stream of "
            "Server-Sent Events, each `data:` a chat.completion.chunk, ending with "
            "`data: [DONE]`."
        ),
        status_code=200,
        responses=ERROR_RESPONSES,
    )
    async def create(
        self,
        request: Request[Any, Any, Any],
        data: JSONBody[ChatCompletionRequest],
        chat: NamedDependency[ChatService],
        x_gateway_priority: Annotated[
            str | None,
            HeaderParameter(
                name="X-Gateway-Priority",
                required=False,
                description="(gateway extension) user | task | background",
            ),
        ] = None,
    ) -> Response[Any]:
        prepared = await chat.prepare(data, x_gateway_priority)
        try:
            run = await unless_disconnected(request, chat.start(prepared))
            if data.stream:
                stream = EventSourceResponse(_sse_events(chat, run), ping=SSE_PING_SECONDS)
                return ServerSentEvents(stream)
            completion = await unless_disconnected(request, chat.complete(run))
        except ClientDisconnected:
            # Nobody is listening any more; 499 is what nginx logs for this.
            return Response(content=None, status_code=499)
        return Response(completion)
