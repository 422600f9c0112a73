"""Pydantic models of OpenAI's wire format, named after the OpenAI spec.

Only what the gateway speaks is modelled. Fields the gateway adds beyond the spec are marked
"(gateway extension)". This module imports neither the web framework nor an engine.
"""

from __future__ import annotations

import re
import time
import uuid
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

MAX_STOP_SEQUENCES = 16
TOKEN_ID = re.compile(r"[0-9]{1,9}")
MAX_ECHOED_CHARS = 80
# JSON Schemas are compiled by llguidance: a bounded depth keeps any compiler's recursion safe.
MAX_SCHEMA_DEPTH = 32


def shorten(text: str, limit: int = MAX_ECHOED_CHARS) -> str:
    """A client's string as errors echo it: at most ``limit`` characters."""
    return text if len(text) <= limit else text[:limit] + "..."


def json_depth(value: Any, limit: int) -> int:
    """Nesting depth of a decoded JSON value, counting no further than ``limit + 1``."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            if deepest > limit:
                return deepest
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return deepest


# Tool calling is not supported yet: an empty list (or none) is accepted, and the schema says
# so (maxItems 0) rather than accepting what the server then refuses.
NoTools = Annotated[
    Annotated[list[dict[str, Any]], Field(max_length=0)] | None,
    Field(description="Tool calling is not supported yet: send none or an empty list."),
]


class _Strict(BaseModel):
    # Strict: "5" is not an integer and true is not a number, as in OpenAI's own API.
    model_config = ConfigDict(strict=True)


class TextContentPart(_Strict):
    type: Literal["text"] = Field(description="Only text parts are supported.")
    text: str


class ChatMessage(_Strict):
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[TextContentPart] | None = None
    name: str | None = None

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)

    def as_template_message(self) -> dict[str, str]:
        # "developer" is OpenAI's newer name for the system role.
        role = "system" if self.role == "developer" else self.role
        return {"role": role, "content": self.text()}


class StreamOptions(_Strict):
    include_usage: bool = False


class JSONSchemaFormat(_Strict):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")
    description: str | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = Field(
        None,
        description="Accepted either way: the output always matches the schema (constrained "
        "decoding); objects get additionalProperties: false unless the schema says otherwise.",
    )


class ResponseFormat(_Strict):
    """``text``, ``json_object`` (any JSON object) or ``json_schema``; the JSON ones are
    enforced by constrained decoding: valid JSON always, or ``finish_reason: length`` when
    ``max_tokens`` cut it."""

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JSONSchemaFormat | None = None

    @model_validator(mode="after")
    def _check(self) -> ResponseFormat:
        if self.type == "json_schema" and self.json_schema is None:
            raise ValueError("response_format of type json_schema needs json_schema")
        schema = self.json_schema.schema_ if self.json_schema else None
        if schema is not None and json_depth(schema, MAX_SCHEMA_DEPTH) > MAX_SCHEMA_DEPTH:
            raise ValueError(f"the JSON schema is nested deeper than {MAX_SCHEMA_DEPTH} levels")
        return self


class ChatCompletionRequest(_Strict):
    """``POST /v1/chat/completions``. Unknown fields are ignored, as SDKs add new ones."""

    model_config = ConfigDict(strict=True, extra="ignore")

    model: str = Field(min_length=1)
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, ge=0.0, le=1.0)
    stop: str | Annotated[list[str], Field(max_length=MAX_STOP_SEQUENCES)] | None = None
    seed: int | None = Field(None, ge=-(2**63), le=2**63 - 1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int | None = Field(None, ge=1, le=1, description="Only n=1 is supported.")
    presence_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    logit_bias: (
        dict[
            Annotated[str, Field(pattern=r"^[0-9]{1,9}$")],
            Annotated[float, Field(ge=-100, le=100)],
        ]
        | None
    ) = Field(None, description="Token id (as a string) to a bias from -100 to 100.")
    user: str | None = None
    response_format: ResponseFormat | None = None
    tools: NoTools = None
    tool_choice: Literal["none"] | None = None
    logprobs: Literal[False] | None = Field(
        None, description="Log probabilities are not supported."
    )
    priority: Literal["user", "task", "background"] | None = Field(
        None,
        description="(gateway extension) Scheduling class; also the X-Gateway-Priority header.",
    )
    session: str | None = Field(
        None, description="(gateway extension) The typing-hint session this request completes."
    )

    @field_validator("stop")
    @classmethod
    def _check_stop(cls, value: str | list[str] | None) -> str | list[str] | None:
        if isinstance(value, list) and len(value) > MAX_STOP_SEQUENCES:
            raise ValueError(f"at most {MAX_STOP_SEQUENCES} stop sequences")
        return value

    @field_validator("logit_bias")
    @classmethod
    def _check_logit_bias(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        for key, bias in (value or {}).items():
            # ASCII digits only: str.isdigit() also accepts "²" and other Unicode digits,
            # which int() then refuses. Nine digits bound any vocabulary.
            if not TOKEN_ID.fullmatch(key):
                raise ValueError(f"logit_bias keys are token ids; got {shorten(key)!r}")
            if not -100 <= bias <= 100:
                raise ValueError(f"logit_bias values must be in [-100, 100]; got {bias}")
        return value

    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    def requested_max_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


def completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex[:24]}"


def now() -> int:
    return int(time.time())


class PromptTokensDetails(BaseModel):
    cached_tokens: int = 0


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails = Field(default_factory=PromptTokensDetails)


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None
    refusal: str | None = None


class Choice(BaseModel):
    index: int = 0
    message: AssistantMessage
    finish_reason: Literal["stop", "length"]
    logprobs: None = None


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[Choice]
    usage: Usage
    system_fingerprint: str | None = None


class ChoiceDelta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None


class ChunkChoice(BaseModel):
    index: int = 0
    delta: ChoiceDelta
    finish_reason: Literal["stop", "length"] | None = None
    logprobs: None = None


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: Usage | None = None
    system_fingerprint: str | None = None


class Model(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "onemac-gateway"
    tier: str = Field(description="(gateway extension) The tier this name resolves to.")
    kind: Literal["mlx", "openai", "peer"] = Field(
        description="(gateway extension) The tier's backend kind."
    )
    loaded: bool = Field(
        description="(gateway extension) Local: weights in memory. Upstream: it answers."
    )
    base_model: bool = Field(
        False,
        description="(gateway extension) A base model without a chat template: chats are "
        "rendered as a plain transcript; /v1/completions suits it better.",
    )


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[Model]


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    """OpenAI's error envelope, used for every error the gateway returns."""

    error: ErrorDetail
