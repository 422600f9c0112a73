"""Pydantic models of OpenAI's legacy text completions (``POST /v1/completions``).

The prompt is fed as it is, without a chat template: the natural endpoint for a base model.
This module imports only pydantic and the shared OpenAI models.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gateway.protocol.openai import (
    MAX_STOP_SEQUENCES,
    TOKEN_ID,
    LogitBias,
    RepetitionPenalty,
    StreamOptions,
    StrictModel,
    Usage,
    shorten,
)

MAX_COMPLETION_LOGPROBS = 20
LEGACY_DEFAULT_MAX_TOKENS = 16  # OpenAI's default for this endpoint


class CompletionRequest(StrictModel):
    """``POST /v1/completions``. Unknown fields are ignored, as SDKs add new ones."""

    model_config = ConfigDict(strict=True, extra="ignore")

    model: str = Field(min_length=1)
    prompt: str | Annotated[list[str], Field(min_length=1, max_length=1)] = Field(
        description="A non-empty string, or a list of exactly one."
    )
    suffix: str | None = Field(None, description="Not supported: send none.")
    max_tokens: int | None = Field(
        LEGACY_DEFAULT_MAX_TOKENS,
        ge=1,
        description="OpenAI's default for this endpoint: 16 (also when sent as null).",
    )
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, ge=0.0, le=1.0)
    n: int | None = Field(None, ge=1, le=1, description="Only n=1 is supported.")
    best_of: int | None = Field(None, ge=1, le=1, description="Only best_of=1 is supported.")
    stream: bool = False
    stream_options: StreamOptions | None = None
    logprobs: int | None = Field(
        None,
        ge=0,
        le=MAX_COMPLETION_LOGPROBS,
        description="Log-probabilities of the chosen tokens and of this many alternatives.",
    )
    echo: bool = Field(False, description="Put the prompt before the completion in the text.")
    stop: str | Annotated[list[str], Field(max_length=MAX_STOP_SEQUENCES)] | None = None
    presence_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    repetition_penalty: RepetitionPenalty = None
    logit_bias: LogitBias | None = None
    seed: int | None = Field(None, ge=-(2**63), le=2**63 - 1)
    user: str | None = None
    top_k: int | None = Field(None, ge=0, description="(gateway extension) 0: off.")
    priority: Literal["user", "task", "background"] | None = Field(
        None,
        description="(gateway extension) Scheduling class; also the X-Gateway-Priority header.",
    )

    @field_validator("prompt", mode="after")
    @classmethod
    def _not_empty(cls, value: str | list[str]) -> str | list[str]:
        # An empty prompt gives the model nothing to continue from (no BOS is added here).
        if (value if isinstance(value, str) else value[0]) == "":
            raise ValueError("the prompt is empty")
        return value

    @field_validator("max_tokens", mode="after")
    @classmethod
    def _null_is_the_default(cls, value: int | None) -> int:
        # OpenAI's SDKs send null for "not given": the endpoint's default, not the context.
        return LEGACY_DEFAULT_MAX_TOKENS if value is None else value

    @model_validator(mode="after")
    def _check(self) -> CompletionRequest:
        if self.suffix:
            raise ValueError("suffix (fill in the middle) is not supported")
        if self.echo and self.logprobs is not None:
            raise ValueError("echo with logprobs (the prompt's log-probabilities) is not supported")
        for key in self.logit_bias or {}:
            if not TOKEN_ID.fullmatch(key):
                raise ValueError(f"logit_bias keys are token ids; got {shorten(key)!r}")
        return self

    def prompt_text(self) -> str:
        return self.prompt if isinstance(self.prompt, str) else self.prompt[0]

    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)


def text_completion_id() -> str:
    return f"cmpl-{uuid.uuid4().hex[:24]}"


class CompletionLogprobs(BaseModel):
    tokens: list[str]
    token_logprobs: list[float | None]
    top_logprobs: list[dict[str, float]] | None
    text_offset: list[int]


class CompletionChoice(BaseModel):
    index: int = 0
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: Literal["stop", "length"] | None


class Completion(BaseModel):
    """A whole completion, or (streamed) one chunk of it: both are ``text_completion``."""

    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None
    system_fingerprint: str | None = None
