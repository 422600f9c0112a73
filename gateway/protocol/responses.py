"""Pydantic models of OpenAI's Responses API (``/v1/responses``), named after the spec.

Requests take ``input`` as a string or a list of items; items the gateway cannot use
(images, files, hosted tools' calls) are still parsed, as ``OtherItem`` / ``OtherPart`` /
``OtherTool``, so that the service can refuse them with a 400 naming the field instead of a
schema error listing every variant. The response object, its output items and the stream's
events are in ``gateway.protocol.responses_events``. This module imports only pydantic.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, model_validator

from gateway.protocol.openai import FUNCTION_NAME, MAX_SCHEMA_DEPTH, MAX_TOOLS, json_depth

MAX_METADATA_KEYS = 16  # OpenAI's bounds on metadata
MAX_INPUT_ITEMS = 10_000


def new_id(prefix: str) -> str:
    """OpenAI-looking ids: ``resp_...``, ``msg_...``, ``fc_...``, ``rs_...``."""
    return f"{prefix}_{uuid.uuid4().hex}"


class _Lenient(BaseModel):
    """Items as SDKs send them back: with fields the gateway has no use for (ids, status)."""

    model_config = ConfigDict(strict=True, extra="allow")


class InputText(_Lenient):
    type: Literal["input_text"]
    text: str


class OutputText(_Lenient):
    """An assistant message's text, sent back in the input (annotations are ignored)."""

    type: Literal["output_text"]
    text: str


class Refusal(_Lenient):
    type: Literal["refusal"]
    refusal: str


class OtherPart(_Lenient):
    """Any other content part (input_image, input_file, input_audio): refused, by name."""

    type: str


def _part_kind(value: Any) -> str:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return kind if kind in ("input_text", "output_text", "refusal") else "other"


ContentPart = Annotated[
    Annotated[InputText, Tag("input_text")]
    | Annotated[OutputText, Tag("output_text")]
    | Annotated[Refusal, Tag("refusal")]
    | Annotated[OtherPart, Tag("other")],
    Discriminator(_part_kind),
]


class MessageItem(_Lenient):
    """A message: the user's, the system's (or developer's), or an earlier assistant reply."""

    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[ContentPart]
    id: str | None = None


class FunctionCallItem(_Lenient):
    """An earlier reply's call of a function, sent back with its result (``namespace``: the
    group of a namespaced function)."""

    type: Literal["function_call"]
    call_id: str = Field(min_length=1)
    name: str
    arguments: str
    id: str | None = None
    namespace: str | None = None


class FunctionCallOutputItem(_Lenient):
    """A function's result; ``output`` as text (or text parts)."""

    type: Literal["function_call_output"]
    call_id: str = Field(min_length=1)
    output: str | list[ContentPart]
    id: str | None = None


class ReasoningItem(_Lenient):
    """An earlier reply's reasoning, sent back: accepted and left out (as the chat
    templates drop earlier turns' reasoning)."""

    type: Literal["reasoning"]


class OtherItem(_Lenient):
    """Any other item (item_reference, hosted tools' calls): refused, by name."""

    type: str


def _item_kind(value: Any) -> str:
    if isinstance(value, dict):
        kind = value.get("type", "message" if "role" in value else None)
    else:
        kind = getattr(value, "type", None)
    known = ("message", "function_call", "function_call_output", "reasoning")
    return kind if kind in known else "other"


InputItem = Annotated[
    Annotated[MessageItem, Tag("message")]
    | Annotated[FunctionCallItem, Tag("function_call")]
    | Annotated[FunctionCallOutputItem, Tag("function_call_output")]
    | Annotated[ReasoningItem, Tag("reasoning")]
    | Annotated[OtherItem, Tag("other")],
    Discriminator(_item_kind),
]


class FunctionTool(BaseModel):
    """A function the model may call (Responses' flat shape: no nested ``function``)."""

    model_config = ConfigDict(strict=True, extra="ignore")

    type: Literal["function"]
    name: str = Field(pattern=FUNCTION_NAME)
    description: str | None = None
    parameters: dict[str, Any] | None = Field(
        None, description="A JSON Schema of the arguments (an object); none: no arguments."
    )
    strict: bool | None = Field(
        None, description="Accepted either way: arguments always match the schema."
    )

    @model_validator(mode="after")
    def _check_depth(self) -> FunctionTool:
        if self.parameters is not None and json_depth(self.parameters, MAX_SCHEMA_DEPTH) > (
            MAX_SCHEMA_DEPTH
        ):
            raise ValueError(f"the JSON schema is nested deeper than {MAX_SCHEMA_DEPTH} levels")
        return self


class NamespaceTool(BaseModel):
    """A named group of function tools (Codex CLI offers its sub-agent tools so). A call of
    one comes back as a ``function_call`` item with the inner ``name`` and this ``namespace``."""

    model_config = ConfigDict(strict=True, extra="ignore")

    type: Literal["namespace"]
    name: str = Field(pattern=FUNCTION_NAME)
    description: str | None = None
    tools: Annotated[list[FunctionTool], Field(max_length=MAX_TOOLS)]


class OtherTool(_Lenient):
    """A hosted tool (web_search, file_search, ...): refused, by name (or left out)."""

    type: str


def _tool_kind(value: Any) -> str:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return kind if kind in ("function", "namespace") else "other"


ToolParam = Annotated[
    Annotated[FunctionTool, Tag("function")]
    | Annotated[NamespaceTool, Tag("namespace")]
    | Annotated[OtherTool, Tag("other")],
    Discriminator(_tool_kind),
]

NAMESPACE_SEPARATOR = "."  # a namespaced function's name as the model sees it: "group.name"


def qualified_name(name: str, namespace: str | None) -> str:
    """A function's name as the model sees it (a namespaced one's group first)."""
    return f"{namespace}{NAMESPACE_SEPARATOR}{name}" if namespace else name


def function_names(tools: list[Any] | None) -> list[str]:
    """The names of every function offered, namespaced ones qualified."""
    names: list[str] = []
    for tool in tools or ():
        if isinstance(tool, FunctionTool):
            names.append(tool.name)
        elif isinstance(tool, NamespaceTool):
            names.extend(qualified_name(inner.name, tool.name) for inner in tool.tools)
    return names


class FunctionToolChoice(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")

    type: Literal["function"]
    name: str
    namespace: str | None = None


class OtherToolChoice(_Lenient):
    """allowed_tools, hosted tools, mcp: refused, by name."""

    type: str


def _choice_kind(value: Any) -> str:
    if isinstance(value, str):
        return "mode"
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return "function" if kind == "function" else "other"


ToolChoiceParam = Annotated[
    Annotated[Literal["none", "auto", "required"], Tag("mode")]
    | Annotated[FunctionToolChoice, Tag("function")]
    | Annotated[OtherToolChoice, Tag("other")],
    Discriminator(_choice_kind),
]


class TextFormatText(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")
    type: Literal["text"]


class TextFormatJSONObject(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")
    type: Literal["json_object"]


class TextFormatJSONSchema(BaseModel):
    """Responses' flat ``json_schema`` format (name, schema and strict beside ``type``)."""

    model_config = ConfigDict(strict=True, extra="ignore", populate_by_name=True)

    type: Literal["json_schema"]
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")
    schema_: dict[str, Any] = Field(alias="schema")
    description: str | None = None
    strict: bool | None = Field(
        None, description="Accepted either way: the output always matches the schema."
    )

    @model_validator(mode="after")
    def _check_depth(self) -> TextFormatJSONSchema:
        if json_depth(self.schema_, MAX_SCHEMA_DEPTH) > MAX_SCHEMA_DEPTH:
            raise ValueError(f"the JSON schema is nested deeper than {MAX_SCHEMA_DEPTH} levels")
        return self


TextFormat = Annotated[
    TextFormatText | TextFormatJSONObject | TextFormatJSONSchema, Field(discriminator="type")
]


class TextConfig(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")

    format: TextFormat | None = None
    verbosity: Literal["low", "medium", "high"] | None = Field(
        None, description="Accepted and ignored."
    )


class ReasoningConfig(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")

    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = Field(
        None,
        description="For models that think: none/minimal switch thinking off where the "
        "template has a switch, the other levels on; absent, the template's default.",
    )
    summary: Literal["auto", "concise", "detailed"] | None = Field(
        None, description="Accepted; the reasoning comes back whole, as reasoning_text."
    )


class ResponseRequest(BaseModel):
    """``POST /v1/responses``. Unknown fields are ignored, as SDKs add new ones."""

    model_config = ConfigDict(strict=True, extra="ignore")

    model: str = Field(min_length=1)
    input: str | Annotated[list[InputItem], Field(min_length=1, max_length=MAX_INPUT_ITEMS)]
    instructions: str | None = Field(
        None, description="The system message (not carried over by previous_response_id)."
    )
    max_output_tokens: int | None = Field(
        None, ge=1, description="Reasoning and answer together (default: the rest of the context)."
    )
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, ge=0.0, le=1.0)
    tools: Annotated[list[ToolParam], Field(max_length=MAX_TOOLS)] | None = None
    tool_choice: ToolChoiceParam | None = Field(
        None, description="none | auto (the default with tools) | required | a named function"
    )
    parallel_tool_calls: bool | None = Field(
        None, description="Several calls in one reply only when true (small models repeat calls)."
    )
    text: TextConfig | None = None
    reasoning: ReasoningConfig | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None
    store: bool = Field(True, description="Keep the response (GET, input_items, continuing).")
    stream: bool = False
    previous_response_id: str | None = Field(
        None, min_length=1, description="Continue the conversation of a stored response."
    )
    background: bool | None = Field(None, description="Only false: no background mode.")
    include: list[str] | None = Field(None, description="Accepted and ignored.")
    truncation: Literal["auto", "disabled"] | None = Field(
        None, description="Accepted; an input over the context is a 400 either way."
    )
    priority: Literal["user", "task", "background"] | None = Field(
        None,
        description="(gateway extension) Scheduling class; also the X-Gateway-Priority header.",
    )
    session: str | None = Field(
        None, description="(gateway extension) The typing-hint session this request completes."
    )

    @model_validator(mode="after")
    def _check(self) -> ResponseRequest:
        if self.metadata is not None:
            if len(self.metadata) > MAX_METADATA_KEYS:
                raise ValueError(f"metadata has at most {MAX_METADATA_KEYS} keys")
            for key, value in self.metadata.items():
                if len(key) > 64 or len(value) > 512:
                    raise ValueError("metadata keys have at most 64 characters, values 512")
        if self.background:
            raise ValueError("background mode is not supported")
        names = function_names(self.tools)
        if len(set(names)) != len(names):
            raise ValueError("tools: function names must be unique")
        choice = self.tool_choice
        if isinstance(choice, FunctionToolChoice) and (
            qualified_name(choice.name, choice.namespace) not in names
        ):
            raise ValueError(f"tool_choice names an unknown function {choice.name[:80]!r}")
        if choice in ("required",) and not names:
            raise ValueError("tool_choice 'required' needs function tools")
        return self


class DeletedResponse(BaseModel):
    id: str
    object: Literal["response.deleted"] = "response.deleted"
    deleted: bool = True


class InputItemList(BaseModel):
    """``GET /v1/responses/{id}/input_items``: OpenAI's list shape."""

    object: Literal["list"] = "list"
    data: list[dict[str, Any]]
    first_id: str | None
    last_id: str | None
    has_more: bool
