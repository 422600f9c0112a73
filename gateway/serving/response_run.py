"""One response in flight: the request, its items, the chat run under it, and the response
object it makes at each stage (created, in progress, completed, incomplete, failed)."""

from __future__ import annotations

import time
from typing import Literal

from pydantic import BaseModel

from gateway.protocol.responses import InputItem, ResponseRequest
from gateway.protocol.responses_events import (
    IncompleteDetails,
    InputTokensDetails,
    OutputTokensDetails,
    ReasoningEcho,
    Response,
    ResponseUsage,
)
from gateway.serving.chat import DEFAULT_TEMPERATURE, ChatRun, PreparedChat, StreamHead
from gateway.serving.responses_items import OfferedTools
from gateway.serving.responses_output import OutputBuilder
from gateway.serving.usage import TokenUsage


class ResponseRun:
    """One response: the request, its items, and (once started) the chat run under it."""

    def __init__(
        self,
        request: ResponseRequest,
        items: list[InputItem],
        prepared: PreparedChat,
        tools: OfferedTools | None = None,
    ) -> None:
        self.request = request
        self.items = items
        self.prepared = prepared
        self.tools = tools or OfferedTools(None)
        self.id = prepared.id
        self.created = prepared.created
        self.chat: ChatRun | None = None

    @staticmethod
    def in_progress(request: ResponseRequest, head: StreamHead) -> Response:
        """The response a stream opens with, before it is prepared (``head`` names it)."""
        return _response(request, head.id, head.created, None, "in_progress", None)

    @property
    def started(self) -> ChatRun:
        assert self.chat is not None, "start the response first"
        return self.chat

    @property
    def incomplete(self) -> bool:
        return self.chat is not None and self.chat.finish_reason == "length"

    def final_status(self) -> Literal["completed", "incomplete"]:
        return "incomplete" if self.incomplete else "completed"

    def complete_calls(self) -> set[str]:
        parser = self.chat.parser if self.chat is not None else None
        return {call.id for call in parser.calls if call.complete} if parser else set()

    def response(self, builder: OutputBuilder | None, status: Status) -> Response:
        response = _response(self.request, self.id, self.created, builder, status, self.chat)
        if self.tools.dropped:  # said where the client looks (its metadata has room: 16 keys)
            note = "left out (not supported here): " + ", ".join(self.tools.dropped)
            response.metadata = {**response.metadata, "gateway_dropped_tools": note[:512]}
        return response


Status = Literal["in_progress", "completed", "incomplete", "failed"]


def _response(
    request: ResponseRequest,
    response_id: str,
    created: int,
    builder: OutputBuilder | None,
    status: Status,
    chat: ChatRun | None,
) -> Response:
    fmt = request.text.format if request.text and request.text.format else None
    usage = None
    if chat is not None and status != "in_progress":
        usage = response_usage(chat.usage())
    choice = request.tool_choice
    return Response(
        id=response_id,
        created_at=created,
        status=status,
        completed_at=int(time.time()) if status == "completed" else None,
        incomplete_details=IncompleteDetails(reason="max_output_tokens")
        if status == "incomplete"
        else None,
        instructions=request.instructions,
        max_output_tokens=request.max_output_tokens,
        model=request.model,
        output=builder.output() if builder is not None else [],
        parallel_tool_calls=request.parallel_tool_calls is True,
        previous_response_id=request.previous_response_id,
        reasoning=ReasoningEcho(
            effort=request.reasoning.effort if request.reasoning else None,
            summary=request.reasoning.summary if request.reasoning else None,
        ),
        store=request.store,
        temperature=_temperature(request, chat),
        text={
            "format": fmt.model_dump(mode="json", by_alias=True, exclude_none=True)
            if fmt
            else {"type": "text"}
        },
        tool_choice=choice.model_dump(mode="json")
        if isinstance(choice, BaseModel)
        else choice or "auto",
        tools=[t.model_dump(mode="json", exclude_none=True) for t in request.tools or ()],
        top_p=1.0 if request.top_p is None else request.top_p,
        usage=usage,
        user=request.user,
        metadata=request.metadata or {},
    )


def response_usage(usage: TokenUsage) -> ResponseUsage:
    """The chat's tokens in the Responses API's shape."""
    return ResponseUsage(
        input_tokens=usage.prompt,
        input_tokens_details=InputTokensDetails(cached_tokens=usage.cached),
        output_tokens=usage.completion,
        output_tokens_details=OutputTokensDetails(
            reasoning_tokens=usage.reasoning or 0,
            accepted_prediction_tokens=usage.accepted or 0,
        ),
        total_tokens=usage.total,
    )


def _temperature(request: ResponseRequest, chat: ChatRun | None) -> float:
    """The temperature sampled with (a tier's default where the request set none)."""
    if request.temperature is not None:
        return request.temperature
    return chat.chat.params.temperature if chat is not None else DEFAULT_TEMPERATURE
