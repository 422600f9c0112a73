"""``POST /v1/embeddings``: OpenAI's embeddings from a local tier's model."""

from __future__ import annotations

from typing import Any

from litestar import Controller, Request, Response, post
from litestar.di import NamedDependency
from litestar.params import JSONBody

from gateway.protocol.embeddings import EmbeddingRequest
from gateway.routes.disconnect import ClientDisconnected, unless_disconnected
from gateway.routes.errors import ERROR_RESPONSES
from gateway.serving.embeddings import EmbeddingsService


class EmbeddingsController(Controller):
    path = "/v1/embeddings"
    tags = ["OpenAI"]

    @post(
        "",
        summary="Create embeddings",
        description=(
            "The last hidden state of a local tier's model, mean-pooled over each input's "
            "tokens and L2-normalized (as llama.cpp and Ollama do for generative models). "
            "All inputs run as one job in the inference slot at priority task, one by one: an "
            "input's vector is the same alone or in a batch."
        ),
        status_code=200,
        responses=ERROR_RESPONSES,
    )
    async def create(
        self,
        request: Request[Any, Any, Any],
        data: JSONBody[EmbeddingRequest],
        embeddings: NamedDependency[EmbeddingsService],
    ) -> Response[Any]:
        try:
            result = await unless_disconnected(request, embeddings.create(data))
        except ClientDisconnected:
            return Response(content=None, status_code=499)
        return Response(result)
