"""``/v1/responses``: OpenAI's Responses API (create, retrieve, delete, list input items)."""

from __future__ import annotations

import functools
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

from litestar import Controller, Request, Response, delete, get, post
from litestar.di import NamedDependency
from litestar.params import FromPath, FromQuery, JSONBody, QueryParameter
from pydantic import BaseModel

from gateway.errors import GatewayError
from gateway.protocol.responses import DeletedResponse, InputItemList, ResponseRequest
from gateway.protocol.responses_events import Response as ResponseObject
from gateway.routes.answer import OpensEarly, answer, served_by
from gateway.routes.errors import ERROR_RESPONSES
from gateway.routes.params import PriorityHeader
from gateway.routes.sse import Dialect
from gateway.serving.chat import StreamHead
from gateway.serving.response_run import ResponseRun
from gateway.serving.responses import MAX_LISTED_ITEMS, ResponsesService


class ResponsesController(Controller):
    path = "/v1/responses"
    tags = ["OpenAI"]

    @post(
        "",
        summary="Create a model response (OpenAI Responses API)",
        description=(
            "OpenAI's Responses API on the same service as chat completions. With "
            "`stream: true`: Server-Sent Events named by their `type` (response.created, "
            "response.in_progress, response.output_item.added, response.content_part.added, "
            "response.output_text.delta/.done, response.reasoning_text.delta/.done, "
            "response.function_call_arguments.delta/.done, response.content_part.done, "
            "response.output_item.done, response.completed or response.incomplete; a failure "
            "after the start: error, then response.failed), each with its sequence_number."
        ),
        status_code=200,
        responses=ERROR_RESPONSES,
    )
    async def create(
        self,
        request: Request[Any, Any, Any],
        data: JSONBody[ResponseRequest],
        responses: NamedDependency[ResponsesService],
        x_gateway_priority: PriorityHeader = None,
    ) -> Response[Any]:
        fmt = Responses(responses, x_gateway_priority)
        return await answer(request, fmt, data, data.stream)

    @get(
        "/{response_id:str}",
        summary="Retrieve a stored response",
        responses=ERROR_RESPONSES,
    )
    async def retrieve(
        self, response_id: FromPath[str], responses: NamedDependency[ResponsesService]
    ) -> ResponseObject:
        return await responses.retrieve(response_id)

    @delete(
        "/{response_id:str}",
        status_code=200,
        summary="Delete a stored response",
        responses=ERROR_RESPONSES,
    )
    async def delete(
        self, response_id: FromPath[str], responses: NamedDependency[ResponsesService]
    ) -> DeletedResponse:
        return await responses.delete(response_id)

    @get(
        "/{response_id:str}/input_items",
        summary="List a stored response's input items",
        responses=ERROR_RESPONSES,
    )
    async def input_items(
        self,
        response_id: FromPath[str],
        responses: NamedDependency[ResponsesService],
        order: FromQuery[Literal["asc", "desc"]] = "desc",
        after: FromQuery[str | None] = None,
        limit: Annotated[int, QueryParameter(ge=1, le=MAX_LISTED_ITEMS)] = 20,
    ) -> InputItemList:
        return await responses.input_items(response_id, order, after, limit)


@dataclass(frozen=True)
class Responses(OpensEarly[ResponseRequest, ResponseRun, ResponseRun]):
    """The Responses API for ``answer``: a stream opens with response.created and
    response.in_progress; a start that fails then ends it with error and response.failed."""

    responses: ResponsesService
    priority: str | None = None  # the X-Gateway-Priority header
    dialect: ClassVar[Dialect] = "responses"

    async def prepare(self, data: ResponseRequest) -> ResponseRun:
        return await self.responses.prepare(data, self.priority)

    async def start(self, prepared: ResponseRun) -> ResponseRun:
        return await self.responses.start(prepared)

    async def complete(self, data: ResponseRequest, run: ResponseRun) -> ResponseObject:
        return await self.responses.complete(run)

    def head(self, data: ResponseRequest) -> StreamHead:
        return self.responses.head(data)

    async def begin(self, data: ResponseRequest, head: StreamHead) -> ResponseRun:
        return await self.responses.begin(data, self.priority, head)

    def opening(
        self, data: ResponseRequest, head: StreamHead, run: ResponseRun | None
    ) -> Sequence[BaseModel]:
        return self.responses.opening(data, head)

    def rest(self, data: ResponseRequest, run: ResponseRun) -> AsyncGenerator[BaseModel, None]:
        return self.responses.rest(run)

    async def abandon(self, run: ResponseRun) -> None:
        await self.responses.abandon(run)

    def failed(
        self, data: ResponseRequest, head: StreamHead
    ) -> Callable[[GatewayError], Sequence[BaseModel]]:
        return functools.partial(self.responses.failed, data, head)

    def headers(self, run: ResponseRun | None) -> dict[str, str]:
        return served_by(run.started if run else None)
