"""Typing hints (gateway extension, not in the OpenAI spec): ``/v1/typing``."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from gateway.protocol.openai import ChatMessage, NoTools

HintStateName = Literal["queued", "computing", "ready", "used", "aborted", "superseded", "expired"]


class TypingHintRequest(BaseModel):
    """The conversation so far, posted when the user starts typing the next message."""

    model_config = ConfigDict(strict=True, extra="ignore")

    model: str | None = Field(None, description="Default: the gateway's default model.")
    messages: list[ChatMessage] = Field(
        min_length=1, description="Everything that will precede the message being typed."
    )
    tools: NoTools = None
    session: str | None = Field(
        None,
        min_length=1,
        max_length=200,
        description="A newer hint of the same session supersedes the older one.",
    )
    draft: str | None = Field(None, description="The text typed so far (progressive hints).")


class TypingHint(BaseModel):
    id: str
    object: Literal["typing.hint"] = "typing.hint"
    state: HintStateName
    model: str
    session: str | None = None
    prefix_tokens: int = Field(description="Tokens of the fixed prefix this hint pre-computes.")
    cached_tokens: int = Field(
        0, description="Of those, tokens already in the cache when it started."
    )
    created_at: int
    expires_at: int
