"""``POST /v1/messages`` and ``/v1/messages/count_tokens``: Anthropic's Messages API.

Errors on these paths come in Anthropic's shape (``gateway.routes.errors``); streams are
Anthropic's named events, without OpenAI's ``[DONE]``.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from litestar import Controller, Request, Response, post
from litestar.di import NamedDependency
from litestar.params import JSONBody
from pydantic import BaseModel

from gateway.protocol.anthropic import (
    CountTokensRequest,
    CountTokensResponse,
    Message,
    MessagesRequest,
)
from gateway.routes.answer import OpensEarly, answer
from gateway.routes.errors import ANTHROPIC_ERROR_RESPONSES
from gateway.routes.sse import Dialect
from gateway.serving.anthropic import AnthropicMessages
from gateway.serving.chat import ChatRun, PreparedChat, StreamHead


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
        return await answer(request, Messages(anthropic), data, data.stream)

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


@dataclass(frozen=True)
class Messages(OpensEarly[MessagesRequest, PreparedChat, ChatRun]):
    """Anthropic's messages for ``answer``: a stream opens with message_start."""

    anthropic: AnthropicMessages
    dialect: ClassVar[Dialect] = "anthropic"

    async def prepare(self, data: MessagesRequest) -> PreparedChat:
        return await self.anthropic.prepare(data)

    async def start(self, prepared: PreparedChat) -> ChatRun:
        return await self.anthropic.start(prepared)

    async def complete(self, data: MessagesRequest, run: ChatRun) -> Message:
        return await self.anthropic.complete(run, data)

    def head(self, data: MessagesRequest) -> StreamHead:
        return self.anthropic.head(data)

    async def begin(self, data: MessagesRequest, head: StreamHead) -> ChatRun:
        return await self.anthropic.begin(data, head)

    def opening(
        self, data: MessagesRequest, head: StreamHead, run: ChatRun | None
    ) -> Sequence[BaseModel]:
        return self.anthropic.opening(head, run)

    def rest(self, data: MessagesRequest, run: ChatRun) -> AsyncGenerator[BaseModel, None]:
        return self.anthropic.rest(run, request=data)

    async def abandon(self, run: ChatRun) -> None:
        await self.anthropic.abandon(run)
