"""Embeddings from a generative model: what a backend that embeds returns (its ``embedder()``,
``gateway.seam.backend.Embedder``).

The vector of an input is the model's last hidden state (after its final norm, before the
output head) averaged over the input's tokens and scaled to unit length: what llama.cpp's
server and Ollama return for a generative model. Inputs are computed one at a time, so an
input's vector does not depend on the batch it came in (no padding, no mask). Nothing here
knows HTTP, pydantic or MLX.
"""

from __future__ import annotations

from dataclasses import dataclass

# A text, or token ids taken as they are.
EmbeddingInput = str | tuple[int, ...]


@dataclass(frozen=True)
class Embeddings:
    """One unit vector per input, in the inputs' order, and the tokens they took."""

    vectors: tuple[tuple[float, ...], ...]
    prompt_tokens: int
