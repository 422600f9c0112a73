"""Pydantic models of Anthropic's Messages API (``POST /v1/messages``), named after its spec.

Only what the gateway speaks is modelled: text, tool_use, tool_result and thinking blocks
(images and documents are refused with a clear error). This module imports only pydantic.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gateway.protocol.bounds import MAX_CONTENT_PARTS, MAX_MESSAGES
from gateway.protocol.openai import (
    FUNCTION_NAME,
    MAX_SCHEMA_DEPTH,
    MAX_STOP_SEQUENCES,
    MAX_TOOLS,
    StrictModel,
    json_depth,
    shorten,
)


class TextBlock(StrictModel):
    model_config = ConfigDict(strict=True, extra="ignore")  # e.g. cache_control, citations

    type: Literal["text"]
    text: str


class ToolUseBlock(StrictModel):
    model_config = ConfigDict(strict=True, extra="ignore")

    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any]


class ToolResultBlock(StrictModel):
    model_config = ConfigDict(strict=True, extra="ignore")

    type: Literal["tool_result"]
    tool_use_id: str
    content: str | Annotated[list[TextBlock], Field(max_length=MAX_CONTENT_PARTS)] | None = None
    is_error: bool | None = None

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(block.text for block in self.content)


class ThinkingBlock(StrictModel):
    """An earlier reply's thinking, sent back: accepted and left out of the prompt (templates
    drop earlier turns' reasoning; the signature is not checked)."""

    model_config = ConfigDict(strict=True, extra="ignore")

    type: Literal["thinking"]
    thinking: str
    signature: str | None = None


class RedactedThinkingBlock(StrictModel):
    model_config = ConfigDict(strict=True, extra="ignore")

    type: Literal["redacted_thinking"]
    data: str


ContentBlock = Annotated[
    TextBlock | ToolUseBlock | ToolResultBlock | ThinkingBlock | RedactedThinkingBlock,
    Field(discriminator="type"),
]


SUPPORTED_BLOCKS = ("text", "tool_use", "tool_result", "thinking", "redacted_thinking")


class MessageParam(StrictModel):
    role: Literal["user", "assistant"]
    content: str | Annotated[list[ContentBlock], Field(max_length=MAX_CONTENT_PARTS)]

    @field_validator("content", mode="before")
    @classmethod
    def _known_blocks(cls, value: Any) -> Any:
        # Named plainly, rather than as a failed match against every block type.
        if isinstance(value, list) and len(value) > MAX_CONTENT_PARTS:
            return value  # refused by max_length, without a look at each block
        for block in value if isinstance(value, list) else ():
            kind = block.get("type") if isinstance(block, dict) else None
            if isinstance(kind, str) and kind not in SUPPORTED_BLOCKS:
                raise ValueError(
                    f"content blocks of type {shorten(kind)!r} are not supported (only "
                    f"{', '.join(SUPPORTED_BLOCKS)})"
                )
        return value


class Tool(StrictModel):
    model_config = ConfigDict(strict=True, extra="ignore")

    name: str = Field(pattern=FUNCTION_NAME)
    description: str | None = None
    input_schema: dict[str, Any] = Field(description="A JSON Schema of the input (an object).")


class ToolChoice(StrictModel):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class ThinkingConfig(StrictModel):
    """``enabled`` (with ``budget_tokens``: forced to end after that many tokens) and
    ``adaptive`` switch the template's thinking on, ``disabled`` off; for models without a
    switch it is accepted and ignored. Anthropic's minimum budget (1,024) is not enforced:
    small local models think in fewer tokens."""

    model_config = ConfigDict(strict=True, extra="ignore")  # e.g. display

    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: int | None = Field(None, ge=0)

    @model_validator(mode="after")
    def _check(self) -> ThinkingConfig:
        if self.type == "enabled" and self.budget_tokens is None:
            raise ValueError("thinking of type enabled needs budget_tokens")
        return self


class JSONOutputFormat(StrictModel):
    """A JSON Schema the reply's text must match (``messages.parse(output_format=...)``),
    enforced by constrained decoding as OpenAI's ``response_format``."""

    type: Literal["json_schema"]
    schema_: dict[str, Any] = Field(alias="schema")

    @field_validator("schema_")
    @classmethod
    def _check_depth(cls, value: dict[str, Any]) -> dict[str, Any]:
        if json_depth(value, MAX_SCHEMA_DEPTH) > MAX_SCHEMA_DEPTH:
            raise ValueError(f"the JSON schema is nested deeper than {MAX_SCHEMA_DEPTH} levels")
        return value


class OutputConfig(StrictModel):
    model_config = ConfigDict(strict=True, extra="ignore")  # e.g. effort

    format: JSONOutputFormat | None = None


class Metadata(StrictModel):
    model_config = ConfigDict(strict=True, extra="ignore")

    user_id: str | None = None


class ThreadCreate(StrictModel):
    """Keep this conversation on the server under the reply's id (Anthropic's message threads)."""

    type: Literal["create"]


class ThreadContinue(StrictModel):
    """Continue the thread of an earlier reply: ``messages`` are only the new ones, and the
    system prompt and tools are the thread's."""

    type: Literal["continue"]
    previous_message_id: str = Field(min_length=1, max_length=200)


class MessagesRequest(StrictModel):
    """``POST /v1/messages``. Unknown fields are ignored, as SDKs add new ones."""

    model_config = ConfigDict(strict=True, extra="ignore")

    model: str = Field(min_length=1)
    max_tokens: int = Field(ge=1)
    messages: list[MessageParam] = Field(
        max_length=MAX_MESSAGES, description="At least one, except when continuing a thread."
    )
    system: str | Annotated[list[TextBlock], Field(max_length=MAX_CONTENT_PARTS)] | None = None
    thread: Annotated[ThreadCreate | ThreadContinue, Field(discriminator="type")] | None = Field(
        None,
        description="Keep the conversation on the server (create), or continue it from a "
        "reply's id (continue); stored as Responses are, with the same retention.",
    )
    stop_sequences: Annotated[list[str], Field(max_length=MAX_STOP_SEQUENCES)] | None = None
    temperature: float | None = Field(None, ge=0.0, le=1.0)
    top_p: float | None = Field(None, ge=0.0, le=1.0)
    top_k: int | None = Field(None, ge=0)
    metadata: Metadata | None = None
    tools: Annotated[list[Tool], Field(max_length=MAX_TOOLS)] | None = None
    tool_choice: ToolChoice | None = None
    thinking: ThinkingConfig | None = None
    output_config: OutputConfig | None = Field(
        None, description="format: a JSON Schema the reply matches (constrained decoding)."
    )
    stream: bool = False
    priority: Literal["user", "task", "background"] | None = Field(
        None, description="(gateway extension) Scheduling class."
    )
    session: str | None = Field(
        None, description="(gateway extension) The typing-hint session this request completes."
    )

    @model_validator(mode="after")
    def _check_tools(self) -> MessagesRequest:
        names = [tool.name for tool in self.tools or ()]
        if len(set(names)) != len(names):
            raise ValueError("tools: tool names must be unique")
        for tool in self.tools or ():
            if json_depth(tool.input_schema, MAX_SCHEMA_DEPTH) > MAX_SCHEMA_DEPTH:
                raise ValueError(
                    f"tool {tool.name}: the schema nests deeper than {MAX_SCHEMA_DEPTH}"
                )
        budget = self.thinking.budget_tokens if self.thinking else None
        if budget is not None and budget >= self.max_tokens:
            raise ValueError("thinking.budget_tokens must be less than max_tokens")
        continues = isinstance(self.thread, ThreadContinue)
        if not self.messages and not continues:
            raise ValueError("messages: at least one message is needed")
        choice = self.tool_choice
        if choice is not None and choice.type == "tool":
            if not choice.name:
                raise ValueError("tool_choice of type tool needs a name")
            # A thread's tools are its first turn's: checked once they are read back.
            if choice.name not in names and not continues:
                raise ValueError(f"tool_choice names an unknown tool {shorten(choice.name)!r}")
        return self

    def system_text(self) -> str | None:
        return system_text(self.system)


class CountTokensRequest(StrictModel):
    """``POST /v1/messages/count_tokens``."""

    model_config = ConfigDict(strict=True, extra="ignore")

    model: str = Field(min_length=1)
    messages: list[MessageParam] = Field(min_length=1, max_length=MAX_MESSAGES)
    system: str | Annotated[list[TextBlock], Field(max_length=MAX_CONTENT_PARTS)] | None = None
    tools: Annotated[list[Tool], Field(max_length=MAX_TOOLS)] | None = None

    def system_text(self) -> str | None:
        return system_text(self.system)


def system_text(system: str | list[TextBlock] | None) -> str | None:
    """A system prompt given as a string or as text blocks, as one text."""
    if system is None or isinstance(system, str):
        return system
    return "\n\n".join(block.text for block in system)


class CountTokensResponse(BaseModel):
    input_tokens: int


def message_id() -> str:
    return f"msg_{uuid.uuid4().hex[:24]}"


# -- responses ---------------------------------------------------------------------------------


class ResponseTextBlock(BaseModel):
    type: Literal["text"] = "text"
    text: str


class ResponseToolUseBlock(BaseModel):
    type: Literal["tool_use"] = "tool_use"
    id: str
    name: str
    input: dict[str, Any]


class ResponseThinkingBlock(BaseModel):
    type: Literal["thinking"] = "thinking"
    thinking: str
    signature: str = Field(
        description="A digest of the thinking text: opaque, and not checked when sent back."
    )


ResponseBlock = ResponseThinkingBlock | ResponseTextBlock | ResponseToolUseBlock


StopReason = Literal["end_turn", "max_tokens", "stop_sequence", "tool_use"]


class AnthropicUsage(BaseModel):
    input_tokens: int = Field(description="Input tokens computed (not read from the cache).")
    output_tokens: int
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0


class Message(BaseModel):
    id: str
    type: Literal["message"] = "message"
    role: Literal["assistant"] = "assistant"
    model: str
    content: list[ResponseBlock]
    stop_reason: StopReason | None
    stop_sequence: str | None = None
    usage: AnthropicUsage


# -- stream events -----------------------------------------------------------------------------


class MessageStartEvent(BaseModel):
    type: Literal["message_start"] = "message_start"
    message: Message


class ContentBlockStartEvent(BaseModel):
    type: Literal["content_block_start"] = "content_block_start"
    index: int
    content_block: ResponseBlock


class PingEvent(BaseModel):
    type: Literal["ping"] = "ping"


class TextDelta(BaseModel):
    type: Literal["text_delta"] = "text_delta"
    text: str


class InputJSONDelta(BaseModel):
    type: Literal["input_json_delta"] = "input_json_delta"
    partial_json: str


class ThinkingDelta(BaseModel):
    type: Literal["thinking_delta"] = "thinking_delta"
    thinking: str


class SignatureDelta(BaseModel):
    """The thinking block's signature, just before its ``content_block_stop``."""

    type: Literal["signature_delta"] = "signature_delta"
    signature: str


class ContentBlockDeltaEvent(BaseModel):
    type: Literal["content_block_delta"] = "content_block_delta"
    index: int
    delta: TextDelta | InputJSONDelta | ThinkingDelta | SignatureDelta


class ContentBlockStopEvent(BaseModel):
    type: Literal["content_block_stop"] = "content_block_stop"
    index: int


class MessageDelta(BaseModel):
    stop_reason: StopReason | None
    stop_sequence: str | None = None


class MessageDeltaUsage(BaseModel):
    """The final usage: a stream that opened before its prompt was counted says it here."""

    output_tokens: int
    input_tokens: int | None = None
    cache_read_input_tokens: int | None = None


class MessageDeltaEvent(BaseModel):
    type: Literal["message_delta"] = "message_delta"
    delta: MessageDelta
    usage: MessageDeltaUsage


class MessageStopEvent(BaseModel):
    type: Literal["message_stop"] = "message_stop"


StreamEvent = (
    MessageStartEvent
    | ContentBlockStartEvent
    | PingEvent
    | ContentBlockDeltaEvent
    | ContentBlockStopEvent
    | MessageDeltaEvent
    | MessageStopEvent
)


class AnthropicErrorDetail(BaseModel):
    type: str
    message: str
    details: dict[str, str] | None = Field(
        None,
        exclude_if=lambda value: value is None,
        description="error_code: what the SDKs recover from (thread_not_found).",
    )


class AnthropicError(BaseModel):
    """Anthropic's error shape, for every error on ``/v1/messages``."""

    type: Literal["error"] = "error"
    error: AnthropicErrorDetail
