"""Pydantic models of the wire formats, one module per format, named after its own spec:
OpenAI's chat completions (``openai``), legacy completions (``completions``), embeddings
(``embeddings``) and Responses (``responses``, ``responses_events``); Anthropic's messages
(``anthropic``); and the gateway's own: typing hints (``hints``), task types (``tasks``)
and peer tickets (``peer``). Imports only pydantic and the standard library.

Here, the request and reply of each endpoint; the parts they are made of stay in their
modules.
"""

from gateway.protocol.anthropic import CountTokensRequest, Message, MessagesRequest
from gateway.protocol.completions import Completion, CompletionRequest
from gateway.protocol.embeddings import CreateEmbeddingResponse, EmbeddingRequest
from gateway.protocol.hints import TypingHint, TypingHintRequest
from gateway.protocol.openai import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ErrorResponse,
    ModelList,
)
from gateway.protocol.peer import Hello, Ticket
from gateway.protocol.responses import ResponseRequest
from gateway.protocol.responses_events import Response
from gateway.protocol.tasks import TaskResult, TaskRunRequest, TaskTypeList

__all__ = [
    "ChatCompletion",
    "ChatCompletionChunk",
    "ChatCompletionRequest",
    "Completion",
    "CompletionRequest",
    "CountTokensRequest",
    "CreateEmbeddingResponse",
    "EmbeddingRequest",
    "ErrorResponse",
    "Hello",
    "Message",
    "MessagesRequest",
    "ModelList",
    "Response",
    "ResponseRequest",
    "TaskResult",
    "TaskRunRequest",
    "TaskTypeList",
    "Ticket",
    "TypingHint",
    "TypingHintRequest",
]
