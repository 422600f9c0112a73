"""Pydantic models of OpenAI's wire format, named after the OpenAI spec.

Only what the gateway speaks is modelled. Fields the gateway adds beyond the spec are marked
"(gateway extension)". This module imports neither the web framework nor an engine.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from gateway.protocol.bounds import MAX_CONTENT_PARTS, MAX_MESSAGES

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


MAX_TOOLS = 128
# Token id (as a string) to a bias from -100 to 100.
LogitBias = dict[
    Annotated[str, Field(pattern=r"^[0-9]{1,9}$")], Annotated[float, Field(ge=-100, le=100)]
]
FUNCTION_NAME = r"^[A-Za-z0-9_-]{1,64}$"
# vLLM's and mlx_lm.server's extension, on chat and legacy completions alike.
RepetitionPenalty = Annotated[
    float | None,
    Field(
        gt=0.0,
        le=2.0,
        description="(extension, as vLLM and mlx_lm.server) Divides the logit of each token "
        "among the completion's last 64 (above 1: repeats less); default: the tier's.",
    ),
]


class StrictModel(BaseModel):
    # Strict: "5" is not an integer and true is not a number, as in OpenAI's own API.
    model_config = ConfigDict(strict=True)


class TextContentPart(StrictModel):
    type: Literal["text"] = Field(description="Only text parts are supported.")
    text: str


class MediaContentPart(StrictModel):
    """An image, audio or file part: parsed only to be refused with a 400 that names it
    (``messages[0].content[1]``), instead of a validation error per branch of the union."""

    model_config = ConfigDict(strict=True, extra="ignore")

    type: Literal["image_url", "input_audio", "file"]


ContentPart = Annotated[TextContentPart | MediaContentPart, Field(discriminator="type")]


class FunctionCall(StrictModel):
    name: str
    arguments: str = Field(description="The arguments as JSON text.")


class ToolCall(StrictModel):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(StrictModel):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | Annotated[list[ContentPart], Field(max_length=MAX_CONTENT_PARTS)] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = Field(None, description="assistant messages only")
    tool_call_id: str | None = Field(None, description="tool messages: the call answered")
    reasoning_content: str | None = Field(
        None,
        description="(gateway extension, as vLLM) An earlier reply's reasoning, sent back: "
        "accepted and left out (templates drop earlier turns' reasoning).",
    )

    @model_validator(mode="after")
    def _check_tool_fields(self) -> ChatMessage:
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("a tool message needs tool_call_id")
        if self.tool_calls and self.role != "assistant":
            raise ValueError("only assistant messages carry tool_calls")
        return self

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text for p in self.content if isinstance(p, TextContentPart))

    def media_part(self) -> int | None:
        """The index of the first part that is not text (an image, audio, a file), if any."""
        if not isinstance(self.content, list):
            return None
        return next(
            (i for i, p in enumerate(self.content) if isinstance(p, MediaContentPart)), None
        )

    def as_template_message(self) -> dict[str, Any]:
        # "developer" is OpenAI's newer name for the system role.
        role = "system" if self.role == "developer" else self.role
        message: dict[str, Any] = {"role": role, "content": self.text()}
        if self.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {
                        "name": call.function.name,
                        "arguments": _json_or_text(call.function.arguments),
                    },
                }
                for call in self.tool_calls
            ]
        if self.tool_call_id is not None:
            message["tool_call_id"] = self.tool_call_id
        return message


def _json_or_text(arguments: str) -> Any:
    """Arguments as chat templates take them: decoded JSON (text if it is not JSON)."""
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments


class FunctionDefinition(StrictModel):
    name: str = Field(pattern=FUNCTION_NAME)
    description: str | None = None
    parameters: dict[str, Any] | None = Field(
        None, description="A JSON Schema of the arguments (an object); none: no arguments."
    )
    strict: bool | None = Field(
        None, description="Accepted either way: arguments always match the schema."
    )

    @field_validator("parameters")
    @classmethod
    def _check_depth(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None and json_depth(value, MAX_SCHEMA_DEPTH) > MAX_SCHEMA_DEPTH:
            raise ValueError(f"the JSON schema is nested deeper than {MAX_SCHEMA_DEPTH} levels")
        return value


class ToolDefinition(StrictModel):
    type: Literal["function"]
    function: FunctionDefinition


class NamedFunction(StrictModel):
    name: str


class NamedToolChoice(StrictModel):
    type: Literal["function"]
    function: NamedFunction


ToolChoiceParam = Literal["none", "auto", "required"] | NamedToolChoice
# The legacy (pre-tools) function_call: none, auto or {"name": ...}.
FunctionCallParam = Literal["none", "auto"] | NamedFunction


class StreamOptions(StrictModel):
    include_usage: bool = False


class JSONSchemaFormat(StrictModel):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")
    description: str | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = Field(
        None,
        description="Accepted either way: the output always matches the schema (constrained "
        "decoding); objects get additionalProperties: false unless the schema says otherwise.",
    )


class ResponseFormat(StrictModel):
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


class ChatCompletionRequest(StrictModel):
    """``POST /v1/chat/completions``. Unknown fields are ignored, as SDKs add new ones."""

    model_config = ConfigDict(strict=True, extra="ignore")

    model: str = Field(min_length=1)
    messages: list[ChatMessage] = Field(min_length=1, max_length=MAX_MESSAGES)
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
    repetition_penalty: RepetitionPenalty = None
    logit_bias: LogitBias | None = Field(
        None, description="Token id (as a string) to a bias from -100 to 100."
    )
    user: str | None = None
    response_format: ResponseFormat | None = None
    tools: Annotated[list[ToolDefinition], Field(max_length=MAX_TOOLS)] | None = Field(
        None,
        description="Functions the model may call. Calls are constrained: always "
        "well-formed, arguments matching each function's schema.",
    )
    tool_choice: ToolChoiceParam | None = Field(
        None, description="none | auto (the default with tools) | required | a named function"
    )
    parallel_tool_calls: bool | None = None
    functions: Annotated[list[FunctionDefinition], Field(max_length=MAX_TOOLS)] | None = Field(
        None,
        description="Legacy (deprecated by OpenAI, still accepted): taken as tools, answered "
        "with message.function_call and finish_reason function_call.",
    )
    function_call: FunctionCallParam | None = Field(
        None, description="Legacy: none | auto | {name}, taken as tool_choice."
    )
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)
    priority: Literal["user", "task", "background"] | None = Field(
        None,
        description="(gateway extension) Scheduling class; also the X-Gateway-Priority header.",
    )
    session: str | None = Field(
        None, description="(gateway extension) The typing-hint session this request completes."
    )
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high"] | None = Field(
        None,
        description="For models that think: none/minimal switch thinking off where the "
        "template has a switch (enable_thinking), low/medium/high switch it on; accepted and "
        "ignored otherwise.",
    )
    thinking_token_budget: int | None = Field(
        None,
        ge=0,
        description="(gateway extension, vLLM's name) Tokens the reasoning section may take "
        "before its end is forced; they count in max_tokens.",
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

    @model_validator(mode="after")
    def _check_tools_and_logprobs(self) -> ChatCompletionRequest:
        if self.functions is not None or self.function_call is not None:
            self._take_legacy_functions()
        names = [tool.function.name for tool in self.tools or ()]
        if len(set(names)) != len(names):
            raise ValueError("tools: function names must be unique")
        choice = self.tool_choice
        if choice is not None and choice != "none" and not names:
            raise ValueError("tool_choice is only allowed when tools are specified")
        if isinstance(choice, NamedToolChoice) and choice.function.name not in names:
            raise ValueError(
                f"tool_choice names an unknown function {shorten(choice.function.name)!r}"
            )
        if self.top_logprobs is not None and not self.logprobs:
            raise ValueError("top_logprobs needs logprobs: true")
        return self

    def _take_legacy_functions(self) -> None:
        """``functions`` / ``function_call`` as ``tools`` / ``tool_choice`` (one call at most,
        as the legacy API answers); ``uses_legacy_functions`` then shapes the answer."""
        if self.tools is not None or self.tool_choice is not None:
            raise ValueError(
                "use tools and tool_choice, or the legacy functions and function_call, not both"
            )
        if self.functions is None:
            raise ValueError("function_call is only allowed when functions are specified")
        self.tools = [ToolDefinition(type="function", function=f) for f in self.functions]
        call = self.function_call
        if isinstance(call, NamedFunction):
            self.tool_choice = NamedToolChoice(type="function", function=call)
        else:
            self.tool_choice = call
        self.parallel_tool_calls = False

    @property
    def uses_legacy_functions(self) -> bool:
        return self.functions is not None

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


class CompletionTokensDetails(BaseModel):
    reasoning_tokens: int = 0
    # OpenAI's Predicted Outputs fields; here: tokens drafted by speculative decoding that the
    # model accepted, and those it did not (each accepted one a decode step saved).
    accepted_prediction_tokens: int = 0
    rejected_prediction_tokens: int = 0


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails = Field(default_factory=PromptTokensDetails)
    # Set for models that think (the completion tokens of the reasoning section) and where
    # tokens were drafted (speculative decoding).
    completion_tokens_details: CompletionTokensDetails | None = None


class ResponseFunctionCall(BaseModel):
    name: str
    arguments: str


class ResponseToolCall(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: ResponseFunctionCall


class _OmitsReasoning(BaseModel):
    """``reasoning_content`` (and the legacy ``function_call``) left out when there is none:
    replies of models that do not think, to requests without legacy functions, look exactly
    as before."""

    @model_serializer(mode="wrap")
    def _omit_reasoning(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        for key in ("reasoning_content", "function_call"):
            if data.get(key) is None:
                data.pop(key, None)
        return data


class AssistantMessage(_OmitsReasoning):
    role: Literal["assistant"] = "assistant"
    content: str | None
    refusal: str | None = None
    tool_calls: list[ResponseToolCall] | None = None
    function_call: ResponseFunctionCall | None = Field(
        None, description="Legacy: the call, when the request gave functions."
    )
    reasoning_content: str | None = Field(
        None, description="(as vLLM, llama.cpp, DeepSeek) The reply's reasoning section."
    )


class TopLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int] | None


class TokenLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int] | None
    top_logprobs: list[TopLogprob]


class ChoiceLogprobs(BaseModel):
    content: list[TokenLogprob] | None
    refusal: list[TokenLogprob] | None = None


FinishReason = Literal["stop", "length", "tool_calls", "function_call"]


class Choice(BaseModel):
    index: int = 0
    message: AssistantMessage
    finish_reason: FinishReason
    logprobs: ChoiceLogprobs | None = None


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[Choice]
    usage: Usage
    system_fingerprint: str | None = None


class _OmitsUnset(BaseModel):
    """Fields left None are left out, as OpenAI's own deltas do: the SDK's stream helpers
    merge deltas key by key, and a ``"type": null`` would overwrite the call's type."""

    @model_serializer(mode="wrap")
    def _omit_none(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return {k: v for k, v in handler(self).items() if v is not None}


class ChoiceDeltaFunction(_OmitsUnset):
    name: str | None = None
    arguments: str | None = None


class ChoiceDeltaToolCall(_OmitsUnset):
    index: int
    id: str | None = None
    type: Literal["function"] | None = None
    function: ChoiceDeltaFunction


class ChoiceDelta(_OmitsReasoning):
    role: Literal["assistant"] | None = None
    content: str | None = None
    tool_calls: list[ChoiceDeltaToolCall] | None = None
    function_call: ChoiceDeltaFunction | None = None  # legacy functions
    reasoning_content: str | None = None


class ChunkChoice(BaseModel):
    index: int = 0
    delta: ChoiceDelta
    finish_reason: FinishReason | None = None
    logprobs: ChoiceLogprobs | None = None


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
    kind: Literal["mlx", "openai", "mlx-distributed", "peer"] = Field(
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
