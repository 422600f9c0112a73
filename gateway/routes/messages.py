"""``POST /v1/messages`` and ``/v1/messages/count_tokens``: Anthropic's Messages API.

Errors on these paths come in Anthropic's shape (``gateway.routes.errors``); streams are
Anthropic's named events, without OpenAI's ``[DONE]``.
"""

from __future__ import annotations

import functools
from typing import Any

from litestar import Controller, Request, Response, post
from litestar.di import NamedDependency
from litestar.params import JSONBody

from gateway.protocol.anthropic import CountTokensRequest, CountTokensResponse, MessagesRequest
from gateway.routes.disconnect import ClientDisconnected, unless_disconnected
from gateway.routes.errors import ANTHROPIC_ERROR_RESPONSES
from gateway.routes.opening import begin_within_grace, opened, ready
from gateway.routes.sse import ServerSentEvents
from gateway.serving.anthropic import AnthropicMessages


class MessagesController(Controller):
    path = "/v1/messages"
    tags = ["Anthropic"]

    @post(
        "",
        summary="Create a message (Anthropic Messages API)",
        description=(
            "Anthropic's Messages API on the same service as chat completions. With "
            "`stream: true`: Server-Sent Events message_start, content_block_start, ping, "
            "content_block_delta (text_delta, input_json_delta), content_block_stop, "
            "message_delta, message_stop; a failure after the start is an `error` event. "
            "Authenticate with `x-api-key` or a bearer token."
        ),
        status_code=200,
        responses=ANTHROPIC_ERROR_RESPONSES,
    )
    async def create(
        self,
        request: Request[Any, Any, Any],
        data: JSONBody[MessagesRequest],
        anthropic: NamedDependency[AnthropicMessages],
    ) -> Response[Any]:
        try:
            if data.stream:
                head = anthropic.head(data)
                begun = await begin_within_grace(request, anthropic.begin(data, head))
                opening = anthropic.opening(head, ready(begun))
                rest = functools.partial(anthropic.rest, request=data)
                stream = opened(opening, begun, rest, anthropic.abandon)
                return ServerSentEvents(stream, dialect="anthropic")
            prepared = await anthropic.prepare(data)
            run = await unless_disconnected(request, anthropic.start(prepared))
            message = await unless_disconnected(request, anthropic.complete(run, data))
        except ClientDisconnected:
            return Response(content=None, status_code=499)
        return Response(message)

    @post(
        "/count_tokens",
        summary="Count the tokens of a message (Anthropic Messages API)",
        description="The prompt's tokens as the tier's model renders it (local tiers).",
        status_code=200,
        responses=ANTHROPIC_ERROR_RESPONSES,
    )
    async def count_tokens(
        self,
        data: JSONBody[CountTokensRequest],
        anthropic: NamedDependency[AnthropicMessages],
    ) -> CountTokensResponse:
        return CountTokensResponse(input_tokens=await anthropic.count_tokens(data))
