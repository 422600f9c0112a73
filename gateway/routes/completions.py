"""``POST /v1/completions``: OpenAI's legacy text completions, JSON or SSE."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

from litestar import Controller, Request, Response, post
from litestar.di import NamedDependency
from litestar.params import JSONBody

from gateway.protocol.completions import Completion, CompletionRequest
from gateway.routes.answer import WireFormat, answer
from gateway.routes.errors import ERROR_RESPONSES
from gateway.routes.params import PriorityHeader
from gateway.serving.chat import ChatRun, PreparedChat
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
        fmt = TextCompletions(completions, x_gateway_priority)
        return await answer(request, fmt, data, data.stream)


@dataclass(frozen=True)
class TextCompletions(WireFormat[CompletionRequest, PreparedChat, ChatRun]):
    """Legacy completions for ``answer``: a stream opens once the completion has started."""

    completions: CompletionsService
    priority: str | None = None  # the X-Gateway-Priority header

    async def prepare(self, data: CompletionRequest) -> PreparedChat:
        return await self.completions.prepare(data, self.priority)

    async def start(self, prepared: PreparedChat) -> ChatRun:
        return await self.completions.start(prepared)

    async def complete(self, data: CompletionRequest, run: ChatRun) -> Completion:
        return await self.completions.complete(run, data.echo)

    def stream(self, data: CompletionRequest, run: ChatRun) -> AsyncGenerator[Completion, None]:
        return self.completions.stream(run, data.echo)
