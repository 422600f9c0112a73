"""``/v1/responses``: OpenAI's Responses API (create, retrieve, delete, list input items)."""

from __future__ import annotations

import functools
from typing import Annotated, Any, Literal

from litestar import Controller, Request, Response, delete, get, post
from litestar.di import NamedDependency
from litestar.params import FromPath, FromQuery, JSONBody, QueryParameter

from gateway.protocol.responses import DeletedResponse, InputItemList, ResponseRequest
from gateway.protocol.responses_events import Response as ResponseObject
from gateway.routes.chat import served_by
from gateway.routes.disconnect import ClientDisconnected, unless_disconnected
from gateway.routes.errors import ERROR_RESPONSES
from gateway.routes.opening import begin_within_grace, opened, ready
from gateway.routes.params import PriorityHeader
from gateway.routes.sse import ServerSentEvents
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
        try:
            if data.stream:
                head = responses.head(data)
                begun = await begin_within_grace(
                    request, responses.begin(data, x_gateway_priority, head)
                )
                run = ready(begun)
                headers = served_by(run.started if run else None)
                stream = opened(
                    responses.opening(data, head),
                    begun,
                    responses.rest,
                    responses.abandon,
                    functools.partial(responses.failed, data, head),
                )
                return ServerSentEvents(stream, "responses", headers=headers)
            prepared = await responses.prepare(data, x_gateway_priority)
            run = await unless_disconnected(request, responses.start(prepared))
            headers = served_by(run.started)
            response = await unless_disconnected(request, responses.complete(run))
        except ClientDisconnected:
            return Response(content=None, status_code=499)
        return Response(response, headers=headers)

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
