"""``POST /v1/chat/completions``: validate, hand to the chat service, answer JSON or SSE."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from typing import Any

from litestar import Controller, Request, Response, post
from litestar.di import NamedDependency
from litestar.params import JSONBody
from pydantic import BaseModel

from gateway.protocol.openai import ChatCompletion, ChatCompletionChunk, ChatCompletionRequest
from gateway.routes.answer import OpensEarly, answer, served_by
from gateway.routes.errors import ERROR_RESPONSES
from gateway.routes.params import PriorityHeader
from gateway.serving.chat import ChatRun, PreparedChat, StreamHead
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
        chat = ChatCompletions(openai_chat, x_gateway_priority)
        return await answer(request, chat, data, data.stream)


@dataclass(frozen=True)
class ChatCompletions(OpensEarly[ChatCompletionRequest, PreparedChat, ChatRun]):
    """Chat completions for ``answer``: a stream opens with the assistant's role."""

    chat: OpenAIChat
    priority: str | None = None  # the X-Gateway-Priority header

    async def prepare(self, data: ChatCompletionRequest) -> PreparedChat:
        return await self.chat.prepare(data, self.priority)

    async def start(self, prepared: PreparedChat) -> ChatRun:
        return await self.chat.start(prepared)

    async def complete(self, data: ChatCompletionRequest, run: ChatRun) -> ChatCompletion:
        return await self.chat.complete(run)

    def head(self, data: ChatCompletionRequest) -> StreamHead:
        return self.chat.head(data)

    async def begin(self, data: ChatCompletionRequest, head: StreamHead) -> ChatRun:
        return await self.chat.begin(data, self.priority, head)

    def opening(
        self, data: ChatCompletionRequest, head: StreamHead, run: ChatRun | None
    ) -> Sequence[BaseModel]:
        return self.chat.opening(head)

    def rest(
        self, data: ChatCompletionRequest, run: ChatRun
    ) -> AsyncGenerator[ChatCompletionChunk, None]:
        return self.chat.rest(run)

    async def abandon(self, run: ChatRun) -> None:
        await self.chat.abandon(run)

    def headers(self, run: ChatRun | None) -> dict[str, str]:
        return served_by(run)
