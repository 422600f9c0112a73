"""Task types (gateway extension, not in the OpenAI spec): ``/v1/tasks``."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gateway.protocol.openai import Usage


class TaskArgument(BaseModel):
    name: str
    required: bool
    max_length: int
    description: str = ""


class TaskTypeInfo(BaseModel):
    id: str
    object: Literal["task_type"] = "task_type"
    description: str
    tier: str
    priority: Literal["user", "task", "background"]
    arguments: list[TaskArgument]
    output_schema: dict[str, Any] | None = Field(
        description="The JSON Schema of the output; null for text."
    )
    thinking_tag: str | None = Field(None, description="The private thinking section's tag.")


class TaskTypeList(BaseModel):
    object: Literal["list"] = "list"
    data: list[TaskTypeInfo]
    tasks_hash: str = Field(description="Hash of the loaded definitions (peers compare it).")


class TaskRunRequest(BaseModel):
    """``POST /v1/tasks/{task_type}``: the arguments; everything else comes from the task type."""

    model_config = ConfigDict(strict=True, extra="forbid")

    args: dict[str, Any] = Field(
        default_factory=dict, description="Argument name to its text (strings only)."
    )
    stream: bool = False
    priority: Literal["user", "task", "background"] | None = Field(
        None, description="Default: the task type's own priority class."
    )
    session: str | None = Field(
        None, max_length=200, description="The typing-hint session this task completes."
    )


class TaskResult(BaseModel):
    id: str
    object: Literal["task.result"] = "task.result"
    task_type: str
    model: str
    output: Any = Field(
        description="The parsed JSON (JSON tasks), the text (text tasks), or null when "
        "max_tokens cut a JSON output (finish_reason: length)."
    )
    thinking: str | None = Field(description="The private thinking section, never in output.")
    finish_reason: Literal["stop", "length"]
    usage: Usage


class TaskDelta(BaseModel):
    """One streamed piece: thinking and output told apart."""

    type: Literal["thinking.delta", "output.delta"]
    delta: str


class TaskResultEvent(TaskResult):
    """The last streamed event before ``[DONE]``: the whole result, output parsed."""

    type: Literal["task.result"] = "task.result"
