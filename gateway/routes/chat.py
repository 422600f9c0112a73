"""``POST /v1/chat/completions``: validate, hand to the chat service, answer JSON or SSE."""

from __future__ import annotations

from typing import Any

from litestar import Controller, Request, Response, post
from litestar.di import NamedDependency
from litestar.params import JSONBody

from gateway.protocol.openai import ChatCompletionRequest
from gateway.routes.disconnect import ClientDisconnected, unless_disconnected
from gateway.routes.errors import ERROR_RESPONSES
from gateway.routes.opening import begin_within_grace, opened, ready
from gateway.routes.params import PriorityHeader
from gateway.routes.sse import ServerSentEvents
from gateway.serving.chat import ChatRun
from gateway.serving.openai_chat import OpenAIChat


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
        openai_chat: NamedDependency[OpenAIChat],
        x_gateway_priority: PriorityHeader = None,
    ) -> Response[Any]:
        chat = openai_chat
        try:
            if data.stream:
                head = chat.head(data)
                begun = await begin_within_grace(
                    request, chat.begin(data, x_gateway_priority, head)
                )
                headers = served_by(ready(begun))
                stream = opened(chat.opening(head), begun, chat.rest, chat.abandon)
                return ServerSentEvents(stream, headers=headers)
            prepared = await chat.prepare(data, x_gateway_priority)
            run = await unless_disconnected(request, chat.start(prepared))
            headers = served_by(run)
            completion = await unless_disconnected(request, chat.complete(run))
        except ClientDisconnected:
            # Nobody is listening any more; 499 is what nginx logs for this.
            return Response(content=None, status_code=499)
        return Response(completion, headers=headers)


def served_by(run: ChatRun | None) -> dict[str, str]:
    """``X-Gateway-Peer``: the peer that computed the answer (none: this node did, or a
    stream opened before its start said)."""
    node = run.started.node if run is not None else None
    return {"X-Gateway-Peer": node} if node else {}
