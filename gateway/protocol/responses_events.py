"""Pydantic models of what ``/v1/responses`` answers: the response object, its output items,
and the stream's typed events (each with its ``sequence_number``), named after the spec.

The shapes follow the ``openai`` SDK's own types (``openai.types.responses``), whose stream
helper checks identities and order: an item is added before its content, finished with the
same id (a function call: the same call_id), and the final response lists every item.
This module imports only pydantic.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

ItemStatus = Literal["in_progress", "completed", "incomplete"]
ResponseStatus = Literal["in_progress", "completed", "incomplete", "failed"]


class OutputTextPart(BaseModel):
    type: Literal["output_text"] = "output_text"
    text: str
    annotations: list[Any] = Field(default_factory=list)
    logprobs: list[Any] = Field(default_factory=list)


class ReasoningTextPart(BaseModel):
    type: Literal["reasoning_text"] = "reasoning_text"
    text: str


class OutputMessage(BaseModel):
    id: str
    type: Literal["message"] = "message"
    role: Literal["assistant"] = "assistant"
    status: ItemStatus
    content: list[OutputTextPart]


class FunctionCallOutput(BaseModel):
    """A call of a function: ``call_id`` is what the client's result names."""

    id: str
    type: Literal["function_call"] = "function_call"
    call_id: str
    name: str
    arguments: str
    status: ItemStatus
    namespace: str | None = Field(
        None,
        exclude_if=lambda value: value is None,
        description="The group of a namespaced function (``name`` is its own name in it).",
    )


class ReasoningOutput(BaseModel):
    """A thinking model's reasoning, whole (``content``), as open-weight servers return it;
    no summary is written."""

    id: str
    type: Literal["reasoning"] = "reasoning"
    summary: list[Any] = Field(default_factory=list)
    content: list[ReasoningTextPart] = Field(default_factory=list)
    status: ItemStatus


OutputItem = Annotated[
    OutputMessage | FunctionCallOutput | ReasoningOutput, Field(discriminator="type")
]


class InputTokensDetails(BaseModel):
    cached_tokens: int = 0
    cache_write_tokens: int = 0  # (the SDK's type has it; nothing is billed here)


class OutputTokensDetails(BaseModel):
    reasoning_tokens: int = 0
    # Extension, as in chat completions' usage: drafted tokens the model accepted
    # (speculative decoding), each a decode step saved.
    accepted_prediction_tokens: int = 0


class ResponseUsage(BaseModel):
    input_tokens: int
    input_tokens_details: InputTokensDetails
    output_tokens: int
    output_tokens_details: OutputTokensDetails
    total_tokens: int


class IncompleteDetails(BaseModel):
    reason: Literal["max_output_tokens", "content_filter"]


class ResponseError(BaseModel):
    code: str
    message: str


class ReasoningEcho(BaseModel):
    effort: str | None = None
    summary: str | None = None


class Response(BaseModel):
    """The response object (``object: "response"``), as returned, streamed and stored."""

    id: str
    object: Literal["response"] = "response"
    created_at: int
    status: ResponseStatus
    completed_at: int | None = None
    error: ResponseError | None = None
    incomplete_details: IncompleteDetails | None = None
    instructions: str | None = None
    max_output_tokens: int | None = None
    model: str
    output: list[OutputItem]
    parallel_tool_calls: bool
    previous_response_id: str | None = None
    reasoning: ReasoningEcho = Field(default_factory=ReasoningEcho)
    store: bool
    temperature: float
    text: dict[str, Any]
    tool_choice: Any
    tools: list[dict[str, Any]]
    top_p: float
    truncation: Literal["auto", "disabled"] = "disabled"
    usage: ResponseUsage | None = None
    user: str | None = None
    metadata: dict[str, str] = Field(default_factory=dict)


# -- stream events -----------------------------------------------------------------------------


class _Event(BaseModel):
    sequence_number: int


class ResponseCreatedEvent(_Event):
    type: Literal["response.created"] = "response.created"
    response: Response


class ResponseInProgressEvent(_Event):
    type: Literal["response.in_progress"] = "response.in_progress"
    response: Response


class ResponseCompletedEvent(_Event):
    type: Literal["response.completed"] = "response.completed"
    response: Response


class ResponseIncompleteEvent(_Event):
    type: Literal["response.incomplete"] = "response.incomplete"
    response: Response


class ResponseFailedEvent(_Event):
    type: Literal["response.failed"] = "response.failed"
    response: Response


class ResponseErrorEvent(_Event):
    type: Literal["error"] = "error"
    code: str | None = None
    message: str
    param: str | None = None


class OutputItemAddedEvent(_Event):
    type: Literal["response.output_item.added"] = "response.output_item.added"
    output_index: int
    item: OutputItem


class OutputItemDoneEvent(_Event):
    type: Literal["response.output_item.done"] = "response.output_item.done"
    output_index: int
    item: OutputItem


class ContentPartAddedEvent(_Event):
    type: Literal["response.content_part.added"] = "response.content_part.added"
    item_id: str
    output_index: int
    content_index: int
    part: OutputTextPart | ReasoningTextPart


class ContentPartDoneEvent(_Event):
    type: Literal["response.content_part.done"] = "response.content_part.done"
    item_id: str
    output_index: int
    content_index: int
    part: OutputTextPart | ReasoningTextPart


class OutputTextDeltaEvent(_Event):
    type: Literal["response.output_text.delta"] = "response.output_text.delta"
    item_id: str
    output_index: int
    content_index: int
    delta: str
    logprobs: list[Any] = Field(default_factory=list)


class OutputTextDoneEvent(_Event):
    type: Literal["response.output_text.done"] = "response.output_text.done"
    item_id: str
    output_index: int
    content_index: int
    text: str
    logprobs: list[Any] = Field(default_factory=list)


class ReasoningTextDeltaEvent(_Event):
    type: Literal["response.reasoning_text.delta"] = "response.reasoning_text.delta"
    item_id: str
    output_index: int
    content_index: int
    delta: str


class ReasoningTextDoneEvent(_Event):
    type: Literal["response.reasoning_text.done"] = "response.reasoning_text.done"
    item_id: str
    output_index: int
    content_index: int
    text: str


class FunctionCallArgumentsDeltaEvent(_Event):
    type: Literal["response.function_call_arguments.delta"] = (
        "response.function_call_arguments.delta"
    )
    item_id: str
    output_index: int
    delta: str


class FunctionCallArgumentsDoneEvent(_Event):
    type: Literal["response.function_call_arguments.done"] = "response.function_call_arguments.done"
    item_id: str
    output_index: int
    name: str
    arguments: str
