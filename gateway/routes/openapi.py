"""The OpenAPI description, made to tell the truth.

Litestar derives the document from the handlers; two things it cannot know are filled in
here, once, at start: the component schemas come from pydantic itself (so every bound the
server enforces, ``temperature`` 0..2 included, appears exactly as validated), and the
endpoints that answer either JSON or a Server-Sent Events stream say so, with the JSON
response's own schema.
"""

from __future__ import annotations

from typing import Any, get_args

from litestar import Litestar
from litestar.openapi.spec import OpenAPIMediaType, OpenAPIResponse, Operation
from pydantic import BaseModel

from gateway.protocol.anthropic import (
    CountTokensRequest,
    Message,
    MessagesRequest,
    StreamEvent,
)
from gateway.protocol.completions import Completion, CompletionRequest
from gateway.protocol.hints import TypingHintRequest
from gateway.protocol.openai import ChatCompletion, ChatCompletionChunk, ChatCompletionRequest
from gateway.protocol.responses import ResponseRequest
from gateway.protocol.responses_events import Response as ResponseObject
from gateway.protocol.tasks import TaskDelta, TaskResult, TaskResultEvent, TaskRunRequest

REF = "#/components/schemas/{model}"
# Requests are described as they are validated; the rest as they are serialized.
REQUEST_MODELS: tuple[type[BaseModel], ...] = (
    ChatCompletionRequest,
    CompletionRequest,
    MessagesRequest,
    CountTokensRequest,
    TaskRunRequest,
    TypingHintRequest,
    ResponseRequest,
)
STREAMS = {
    ("/v1/chat/completions", "post"): (
        ChatCompletion,
        "With `stream: true`: Server-Sent Events, each `data:` a ChatCompletionChunk, ending "
        "with `data: [DONE]` (or, after a failure, an error envelope).",
    ),
    ("/v1/completions", "post"): (
        Completion,
        "With `stream: true`: Server-Sent Events, each `data:` a text_completion chunk, "
        "ending with `data: [DONE]` (or, after a failure, an error envelope).",
    ),
    ("/v1/messages", "post"): (
        Message,
        "With `stream: true`: Server-Sent Events named after their `type` (StreamEvent): "
        "message_start, content_block_start, ping, content_block_delta, content_block_stop, "
        "message_delta, message_stop; or an `error` event after a failure.",
    ),
    ("/v1/responses", "post"): (
        ResponseObject,
        "With `stream: true`: Server-Sent Events named after their `type`, each with its "
        "`sequence_number`: response.created, response.in_progress, output items and their "
        "deltas, then response.completed or response.incomplete (or error and "
        "response.failed after a failure).",
    ),
    ("/v1/tasks/{task_type}", "post"): (
        TaskResult,
        "With `stream: true`: Server-Sent Events `thinking.delta` and `output.delta` "
        "(TaskDelta), then a `task.result` event (TaskResultEvent), then `data: [DONE]`.",
    ),
}
EXTRA_MODELS: tuple[type[BaseModel], ...] = (
    ChatCompletion,
    ChatCompletionChunk,
    Completion,
    Message,
    *get_args(StreamEvent),
    TaskResult,
    TaskDelta,
    TaskResultEvent,
    ResponseObject,
)


def _pydantic_schemas(model: type[BaseModel], mode: str) -> dict[str, Any]:
    schema = model.model_json_schema(ref_template=REF, mode=mode)  # type: ignore[arg-type]
    definitions = schema.pop("$defs", {})
    return {model.__name__: schema, **definitions}


def describe_truthfully(app: Litestar) -> None:
    """Patch ``app.openapi_schema`` in place (called once, at start)."""
    document = app.openapi_schema
    assert document.components is not None
    schemas: dict[str, Any] = dict(document.components.schemas or {})
    for name in list(schemas):
        model = _protocol_model(name)
        if model is not None:
            schemas.update(_pydantic_schemas(model, _mode(model)))
    for model in (*REQUEST_MODELS, *EXTRA_MODELS):
        schemas.update(_pydantic_schemas(model, _mode(model)))
    document.components.schemas = schemas
    for (path, method), (answer, stream_description) in STREAMS.items():
        item = (document.paths or {}).get(path)
        operation: Operation | None = getattr(item, method, None) if item else None
        if operation is None or operation.responses is None:
            continue
        operation.responses["200"] = OpenAPIResponse(
            description=f"A {answer.__name__} (JSON). {stream_description}",
            content={
                "application/json": OpenAPIMediaType(
                    schema={"$ref": REF.format(model=answer.__name__)}  # type: ignore[arg-type]
                ),
                "text/event-stream": OpenAPIMediaType(
                    schema={"type": "string", "description": stream_description}  # type: ignore[arg-type]
                ),
            },
        )


def _mode(model: type[BaseModel]) -> str:
    return "validation" if model in REQUEST_MODELS else "serialization"


def _protocol_model(name: str) -> type[BaseModel] | None:
    from gateway.protocol import (
        anthropic,
        completions,
        hints,
        openai,
        responses,
        responses_events,
        tasks,
    )

    for module in (openai, completions, anthropic, tasks, hints, responses, responses_events):
        candidate = getattr(module, name, None)
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None
