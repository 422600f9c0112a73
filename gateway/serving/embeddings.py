"""OpenAI's embeddings on a local tier: inputs to unit vectors, in OpenAI's shapes.

The vectors come from the tier's backend (``gateway.seam.embedding``: the last hidden state,
mean-pooled and L2-normalized, each input computed alone). Here: ``dimensions`` (the leading
dimensions, renormalized, as OpenAI's shortened embeddings), ``encoding_format`` and usage.
An upstream tier is refused with a 400 rather than relayed (its model is not this one).
"""

from __future__ import annotations

import asyncio
import base64
import math
import struct
from collections.abc import Sequence

from gateway.errors import InvalidRequestError
from gateway.metrics import EmbeddingMetrics
from gateway.protocol.embeddings import (
    CreateEmbeddingResponse,
    Embedding,
    EmbeddingRequest,
    EmbeddingUsage,
)
from gateway.seam.backend import Priority
from gateway.serving.tiers import TierRegistry


class EmbeddingsService:
    """``POST /v1/embeddings`` in the gateway's terms and back."""

    def __init__(self, registry: TierRegistry, metrics: EmbeddingMetrics) -> None:
        self.registry = registry
        self.metrics = metrics

    async def create(self, request: EmbeddingRequest) -> CreateEmbeddingResponse:
        tier = self.registry.resolve(request.model)
        info, embedder = tier.backend.info, tier.backend.embedder()
        if embedder is None or not info.capabilities.local_slot:
            raise InvalidRequestError(
                f"tier {tier.name!r} ({info.kind} backend) does not serve embeddings; "
                "use a local tier",
                param="model",
            )
        outcome = "error"
        try:
            result = await embedder.embed(request.inputs(), Priority.TASK)
            outcome = "ok"
        except asyncio.CancelledError:
            outcome = "cancelled"
            raise
        finally:
            self.metrics.embedding_requests.labels(tier.name, outcome).inc()
        self.metrics.embedding_input_tokens.labels(tier.name).inc(result.prompt_tokens)
        data = []
        for index, vector in enumerate(result.vectors):
            if request.dimensions is not None:
                if request.dimensions > len(vector):
                    raise InvalidRequestError(
                        f"dimensions {request.dimensions} is more than the model's {len(vector)}",
                        param="dimensions",
                    )
                vector = shortened(vector, request.dimensions)
            encoded = as_base64(vector) if request.encoding_format == "base64" else list(vector)
            data.append(Embedding(index=index, embedding=encoded))
        return CreateEmbeddingResponse(
            data=data,
            model=request.model,
            usage=EmbeddingUsage(
                prompt_tokens=result.prompt_tokens, total_tokens=result.prompt_tokens
            ),
        )


def shortened(vector: Sequence[float], dimensions: int) -> tuple[float, ...]:
    """The first ``dimensions`` values scaled back to unit length."""
    head = vector[:dimensions]
    norm = math.sqrt(math.fsum(x * x for x in head)) or 1.0
    return tuple(x / norm for x in head)


def as_base64(vector: Sequence[float]) -> str:
    """OpenAI's base64 encoding: the vector's little-endian float32 bytes."""
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")
