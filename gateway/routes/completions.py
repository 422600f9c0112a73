"""``POST /v1/completions``: OpenAI's legacy text completions, JSON or SSE."""

from __future__ import annotations

from typing import Any

from litestar import Controller, Request, Response, post
from litestar.di import NamedDependency
from litestar.params import JSONBody

from gateway.protocol.completions import CompletionRequest
from gateway.routes.disconnect import ClientDisconnected, unless_disconnected
from gateway.routes.errors import ERROR_RESPONSES
from gateway.routes.params import PriorityHeader
from gateway.routes.sse import ServerSentEvents
from gateway.serving.completions import CompletionsService


class CompletionsController(Controller):
    path = "/v1/completions"
    tags = ["OpenAI"]

    @post(
        "",
        summary="Create a text completion (legacy)",
        description=(
            "OpenAI's legacy completions: the prompt is fed as it is, without a chat "
            "template (the natural endpoint for a base model). With `stream: true` the "
            "answer is a stream of Server-Sent Events, each `data:` a text_completion, "
            "ending with `data: [DONE]`."
        ),
        status_code=200,
        responses=ERROR_RESPONSES,
    )
    async def create(
        self,
        request: Request[Any, Any, Any],
        data: JSONBody[CompletionRequest],
        completions: NamedDependency[CompletionsService],
        x_gateway_priority: PriorityHeader = None,
    ) -> Response[Any]:
        prepared = await completions.prepare(data, x_gateway_priority)
        try:
            run = await unless_disconnected(request, completions.start(prepared))
            if data.stream:
                return ServerSentEvents(completions.stream(run, data.echo))
            result = await unless_disconnected(request, completions.complete(run, data.echo))
        except ClientDisconnected:
            return Response(content=None, status_code=499)
        return Response(result)
