"""OpenAI's Responses API on top of the chat service: the same scheduler, priorities, typing
hints, prefix cache and metrics as chat completions, in the Responses API's shapes.

A request's items become the chat service's conversation (``responses_items``); with
``previous_response_id`` the stored conversation comes first (each earlier response's input
and output items), so the prompt starts with the tokens of the previous turn and its KV
cache is found in the prefix store by tokens, as for a multi-turn chat. The reply's pieces
become output items and typed stream events (``responses_output``). With ``store`` (the
default, as OpenAI's) the response is written to the ``ResponseStore`` before its last event
is sent, so a client may continue the conversation the moment it has the response.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import replace
from typing import Literal

from pydantic import BaseModel

from gateway.errors import GatewayError, InvalidRequestError, NotFoundError
from gateway.protocol.openai import shorten
from gateway.protocol.responses import (
    DeletedResponse,
    InputItem,
    InputItemList,
    ResponseRequest,
    new_id,
)
from gateway.protocol.responses_events import (
    Response,
    ResponseCompletedEvent,
    ResponseCreatedEvent,
    ResponseError,
    ResponseErrorEvent,
    ResponseFailedEvent,
    ResponseIncompleteEvent,
    ResponseInProgressEvent,
)
from gateway.seam.backend import Priority, SamplingParams
from gateway.seam.request_parts import ChatMessage
from gateway.serving.chat import (
    DEFAULT_TEMPERATURE,
    ChatRequest,
    ChatService,
    FieldNames,
    StreamHead,
)
from gateway.serving.openai_chat import thinking_switch
from gateway.serving.response_run import ResponseRun
from gateway.serving.response_store import (
    BrokenChainError,
    ResponseStore,
    StoredResponse,
    StoreUnavailableError,
)
from gateway.serving.responses_items import (
    HOSTED_TOOLS_ACTION,
    conversation,
    offered_tools,
    parse_items,
    request_items,
    stored_input,
    text_grammar,
)
from gateway.serving.responses_output import OutputBuilder

log = logging.getLogger(__name__)
MAX_LISTED_ITEMS = 100


class ResponseHistory:
    """The conversations stored responses end: what a request that continues one (or a
    typing hint for it) puts first. Reads the store only."""

    def __init__(self, store: ResponseStore) -> None:
        self.store = store

    async def items(self, previous_response_id: str | None) -> list[InputItem]:
        """The stored conversation a request continues: each response's input and output."""
        if previous_response_id is None:
            return []
        try:
            chain = await self.store.conversation(previous_response_id)
        except BrokenChainError as exc:
            raise NotFoundError(
                f"Previous response with id '{shorten(previous_response_id)}' continues "
                f"'{shorten(exc.missing)}', which is no longer stored.",
                param="previous_response_id",
            ) from None
        if not chain:
            raise NotFoundError(
                f"Previous response with id '{shorten(previous_response_id)}' not found.",
                param="previous_response_id",
            )
        items: list[InputItem] = []
        for stored in chain:
            items.extend(parse_items(stored.input_items))
            items.extend(parse_items(stored.response.get("output", [])))
        return items

    async def messages(
        self, previous_response_id: str, instructions: str | None
    ) -> tuple[ChatMessage, ...]:
        """A stored conversation as template messages (for typing hints)."""
        return conversation(instructions, await self.items(previous_response_id), [])


class ResponsesService:
    """``/v1/responses``: create, retrieve, delete, list input items."""

    def __init__(
        self,
        service: ChatService,
        store: ResponseStore,
        unsupported_tools: HOSTED_TOOLS_ACTION = "error",
    ) -> None:
        self.service = service
        self.store = store
        self.history = ResponseHistory(store)
        self.unsupported_tools = unsupported_tools

    # -- creating --------------------------------------------------------------------------------

    def head(self, request: ResponseRequest) -> StreamHead:
        """A stream's head, before its response is prepared (``prepare`` takes it)."""
        return StreamHead(new_id("resp"), request.model)

    async def prepare(
        self,
        request: ResponseRequest,
        priority_header: str | None = None,
        head: StreamHead | None = None,
    ) -> ResponseRun:
        arrived = time.perf_counter()
        tier = self.service.registry.resolve(request.model)
        priority = Priority.parse(priority_header or request.priority, Priority.USER)
        items = request_items(request)
        offered = offered_tools(request, self.unsupported_tools)
        if offered.dropped:
            log.info("response: hosted tools left out: %s", ", ".join(offered.dropped))
        history = await self.history.items(request.previous_response_id)
        messages = conversation(request.instructions, history, items)
        effort = request.reasoning.effort if request.reasoning else None
        sampling = SamplingParams(
            max_tokens=request.max_output_tokens,
            temperature=tier.temperature_for(request.temperature, DEFAULT_TEMPERATURE),
            top_p=1.0 if request.top_p is None else request.top_p,
            grammar=text_grammar(request),
        )
        prepared = await self.service.prepare(
            ChatRequest(
                tier,
                messages,
                sampling,
                priority,
                model_name=request.model,
                chat_id=head.id if head else new_id("resp"),
                session=request.session,
                arrived=arrived,
                tool_use=offered.use,
                thinking=thinking_switch(effort),
                fields=FieldNames(max_tokens="max_output_tokens", grammar="text.format"),
            )
        )
        if head is not None:
            prepared = replace(prepared, created=head.created)
        return ResponseRun(request, items, prepared, offered)

    async def begin(
        self, request: ResponseRequest, priority_header: str | None, head: StreamHead
    ) -> ResponseRun:
        """A stream's prepare and start, under the head its opening events already named."""
        return await self.start(await self.prepare(request, priority_header, head))

    async def abandon(self, run: ResponseRun) -> None:
        if run.chat is not None:
            await self.service.abandon(run.chat)

    async def start(self, run: ResponseRun) -> ResponseRun:
        run.chat = await self.service.start(run.prepared)
        return run

    async def complete(self, run: ResponseRun) -> Response:
        builder = OutputBuilder(run.tools.namespaces)
        async with aclosing(self.service.replies(run.started)) as steps:
            async for step in steps:
                for piece in step.pieces:
                    builder.feed(piece)
        builder.finish(run.complete_calls(), run.incomplete)
        response = run.response(builder, run.final_status())
        await self._keep(run, response)
        return response

    def opening(self, request: ResponseRequest, head: StreamHead) -> list[BaseModel]:
        """The stream's first events, sent before the prefill: created, in progress."""
        response = ResponseRun.in_progress(request, head)
        return [
            ResponseCreatedEvent(sequence_number=0, response=response),
            ResponseInProgressEvent(sequence_number=1, response=response),
        ]

    def failed(
        self, request: ResponseRequest, head: StreamHead, exc: GatewayError
    ) -> list[BaseModel]:
        """A start that failed after the opening: the error, then the failed response."""
        failed = ResponseRun.in_progress(request, head)
        failed.status = "failed"
        failed.error = ResponseError(code=exc.code or "server_error", message=exc.message)
        return [
            ResponseErrorEvent(
                sequence_number=2, code=exc.code, message=exc.message, param=exc.param
            ),
            ResponseFailedEvent(sequence_number=3, response=failed),
        ]

    async def stream(self, run: ResponseRun) -> AsyncGenerator[BaseModel, None]:
        """The whole stream: the opening events, then ``rest``."""
        head = StreamHead(run.id, run.request.model, run.created)
        for event in self.opening(run.request, head):
            yield event
        async with aclosing(self.rest(run)) as events:
            async for event in events:
                yield event

    async def rest(self, run: ResponseRun) -> AsyncGenerator[BaseModel, None]:
        """The stream after its opening events: the output items, then the final response."""
        builder = OutputBuilder(run.tools.namespaces)
        builder.sequence = 2  # after the opening's two
        try:
            async with aclosing(self.service.replies(run.started)) as steps:
                async for step in steps:
                    for piece in step.pieces:
                        for event in builder.feed(piece):
                            yield event
        except GatewayError as exc:  # after the 200 was sent: report inside the stream
            for event in builder.close("incomplete"):
                yield event
            yield ResponseErrorEvent(
                sequence_number=builder.number(),
                code=exc.code,
                message=exc.message,
                param=exc.param,
            )
            failed = run.response(builder, "failed")
            failed.error = ResponseError(code=exc.code or "server_error", message=exc.message)
            yield ResponseFailedEvent(sequence_number=builder.number(), response=failed)
            return
        for event in builder.finish(run.complete_calls(), run.incomplete):
            yield event
        status = run.final_status()
        response = run.response(builder, status)
        await self._keep(run, response)
        final = ResponseIncompleteEvent if status == "incomplete" else ResponseCompletedEvent
        yield final(sequence_number=builder.number(), response=response)

    async def _keep(self, run: ResponseRun, response: Response) -> None:
        if not run.request.store:
            return
        stored = StoredResponse(
            id=response.id,
            created_at=time.time(),
            previous_id=run.request.previous_response_id,
            response=response.model_dump(mode="json"),
            input_items=stored_input(run.items),
        )
        try:
            await self.store.put(stored)
        except StoreUnavailableError as exc:  # a full disk must not lose the answer itself
            log.error("response %s: not stored: %s", response.id, exc)
        except Exception:
            log.exception("response %s: not stored", response.id)

    # -- stored responses ------------------------------------------------------------------------

    async def retrieve(self, response_id: str) -> Response:
        return Response.model_validate((await self._stored(response_id)).response)

    async def delete(self, response_id: str) -> DeletedResponse:
        if not await self.store.delete(response_id):
            raise _not_found(response_id)
        return DeletedResponse(id=response_id)

    async def input_items(
        self,
        response_id: str,
        order: Literal["asc", "desc"] = "desc",
        after: str | None = None,
        limit: int = 20,
    ) -> InputItemList:
        """OpenAI's list of a response's own input items (newest first by default)."""
        if not 1 <= limit <= MAX_LISTED_ITEMS:
            raise InvalidRequestError(
                f"limit must be between 1 and {MAX_LISTED_ITEMS}", param="limit"
            )
        items = list((await self._stored(response_id)).input_items)
        if order == "desc":
            items.reverse()
        if after is not None:
            ids = [item.get("id") for item in items]
            if after not in ids:
                raise InvalidRequestError(
                    f"no input item '{shorten(after)}' in this response", param="after"
                )
            items = items[ids.index(after) + 1 :]
        page = items[:limit]
        return InputItemList(
            data=page,
            first_id=page[0]["id"] if page else None,
            last_id=page[-1]["id"] if page else None,
            has_more=len(items) > limit,
        )

    async def _stored(self, response_id: str) -> StoredResponse:
        stored = await self.store.get(response_id)
        if stored is None:
            raise _not_found(response_id)
        return stored


def _not_found(response_id: str) -> NotFoundError:
    return NotFoundError(f"Response with id '{shorten(response_id)}' not found.", param="id")
