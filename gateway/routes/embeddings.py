"""``POST /v1/embeddings``: OpenAI's embeddings from a local tier's model."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from litestar import Controller, Request, Response, post
from litestar.di import NamedDependency
from litestar.params import JSONBody

from gateway.protocol.embeddings import CreateEmbeddingResponse, EmbeddingRequest
from gateway.routes.answer import WireFormat, answer
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
        return await answer(request, Embeddings(embeddings), data, stream=False)


@dataclass(frozen=True)
class Embeddings(WireFormat[EmbeddingRequest, EmbeddingRequest, CreateEmbeddingResponse]):
    """Embeddings for ``answer``: the whole job is the start (never streamed)."""

    embeddings: EmbeddingsService

    async def prepare(self, data: EmbeddingRequest) -> EmbeddingRequest:
        return data  # (checked as the job runs)

    async def start(self, prepared: EmbeddingRequest) -> CreateEmbeddingResponse:
        return await self.embeddings.create(prepared)

    async def complete(
        self, data: EmbeddingRequest, run: CreateEmbeddingResponse
    ) -> CreateEmbeddingResponse:
        return run
