"""Typing hints (gateway extension, not in the OpenAI spec): ``/v1/typing``."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gateway.protocol.bounds import MAX_MESSAGES
from gateway.protocol.openai import MAX_TOOLS, ChatMessage, ToolDefinition

HintStateName = Literal["queued", "computing", "ready", "used", "aborted", "superseded", "expired"]


class TaskHint(BaseModel):
    """A task type about to be run, and the arguments already known."""

    model_config = ConfigDict(strict=True, extra="forbid")

    type: str = Field(min_length=1, max_length=200, description="The task type's id.")
    args: dict[str, Any] = Field(default_factory=dict, description="Arguments known so far.")


class TypingHintRequest(BaseModel):
    """The conversation so far, posted when the user starts typing the next message.

    Either ``messages`` (a chat) or ``task`` (a task type: its static part is warmed, and the
    whole prompt when every required argument is known), or ``previous_response_id`` (a
    stored Responses conversation, with ``instructions`` and any ``messages`` after it).
    """

    model_config = ConfigDict(
        strict=True,
        extra="ignore",
        # The either-or below, as the OpenAPI document states it.
        json_schema_extra={
            "oneOf": [
                {"required": ["messages"], "properties": {"messages": {"type": "array"}}},
                {"required": ["task"], "properties": {"task": {"type": "object"}}},
                {
                    "required": ["previous_response_id"],
                    "properties": {"previous_response_id": {"type": "string"}},
                },
            ]
        },
    )

    model: str | None = Field(
        None, description="Default: the task type's tier, else the default tier."
    )
    messages: list[ChatMessage] | None = Field(
        None,
        min_length=1,
        max_length=MAX_MESSAGES,
        description="Everything that will precede the message being typed.",
    )
    task: TaskHint | None = None
    tools: Annotated[list[ToolDefinition], Field(max_length=MAX_TOOLS)] | None = Field(
        None, description="The functions the chat request will offer (they are in its prefix)."
    )
    session: str | None = Field(
        None,
        min_length=1,
        max_length=200,
        description="A newer hint of the same session supersedes the older one.",
    )
    draft: str | None = Field(None, description="The text typed so far (progressive hints).")
    previous_response_id: str | None = Field(
        None,
        min_length=1,
        description="A stored response (/v1/responses) whose conversation the next request "
        "continues: it is warmed first, then any messages, then the draft.",
    )
    instructions: str | None = Field(
        None,
        description="With previous_response_id: the next request's instructions (its system "
        "message, which comes first).",
    )
    # The sampling the chat request will use: with a draft, the answer's first tokens are
    # computed ahead with it, so a request with the same sampling gets exactly them.
    temperature: float | None = Field(
        None,
        ge=0,
        le=2,
        description="The chat request's temperature (default 0: greedy). Above 0, the answer "
        "is computed ahead only with a seed.",
    )
    top_p: float | None = Field(None, gt=0, le=1, description="The chat request's top_p.")
    seed: int | None = Field(None, description="The chat request's seed.")

    @model_validator(mode="after")
    def _one_of(self) -> TypingHintRequest:
        chat = self.messages is not None or self.previous_response_id is not None
        if chat == (self.task is not None):
            raise ValueError("give either messages (or previous_response_id) or task")
        if self.instructions is not None and self.previous_response_id is None:
            raise ValueError("instructions go with previous_response_id")
        return self


class TypingHint(BaseModel):
    id: str
    object: Literal["typing.hint"] = "typing.hint"
    state: HintStateName
    model: str
    session: str | None = None
    prefix_tokens: int = Field(description="Tokens of the fixed prefix this hint pre-computes.")
    speculated: int | None = Field(
        None,
        description="Tokens of the answer to the draft computed ahead while the user paused "
        "(the hint stays ready): sent at once if the request is exactly the draft, with the "
        "hint's sampling (greedy, or the same temperature, top_p and seed).",
    )
    cached_tokens: int = Field(
        0, description="Of those, tokens already in the cache when it started."
    )
    created_at: int
    expires_at: int
