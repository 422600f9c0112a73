"""Pydantic models of OpenAI's embeddings (``POST /v1/embeddings``).

This module imports only pydantic and the shared OpenAI models.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gateway.protocol.openai import StrictModel

# OpenAI's own bound on the inputs of one request.
MAX_EMBEDDING_INPUTS = 2048
TokenId = Annotated[int, Field(ge=0, le=2**31 - 1)]
TokenList = Annotated[list[TokenId], Field(min_length=1)]


class EmbeddingRequest(StrictModel):
    """``POST /v1/embeddings``. Unknown fields are ignored, as SDKs add new ones."""

    model_config = ConfigDict(strict=True, extra="ignore")

    model: str = Field(min_length=1)
    input: (
        str
        | Annotated[list[str], Field(min_length=1, max_length=MAX_EMBEDDING_INPUTS)]
        | TokenList
        | Annotated[list[TokenList], Field(min_length=1, max_length=MAX_EMBEDDING_INPUTS)]
    ) = Field(
        description="A string, a list of strings, a list of token ids, or a list of such "
        "lists; each within the model's context."
    )
    encoding_format: Literal["float", "base64"] = Field(
        "float", description="base64: the little-endian float32 bytes of each vector."
    )
    dimensions: int | None = Field(
        None, ge=1, description="Keep this many leading dimensions, then renormalize."
    )
    user: str | None = None

    @field_validator("input", mode="before")
    @classmethod
    def _check_shape(cls, value: Any) -> Any:
        """One clear message for a wrong shape, instead of one per branch of the union."""
        if isinstance(value, str):
            return value
        if isinstance(value, list) and 0 < len(value) <= MAX_EMBEDDING_INPUTS:
            if all(isinstance(v, str) for v in value) or all(_is_id(v) for v in value):
                return value
            if all(isinstance(v, list) and v and all(_is_id(t) for t in v) for v in value):
                return value
        raise ValueError(
            "input must be a string, a list of strings, a list of token ids or a list of "
            f"token-id lists (1 to {MAX_EMBEDDING_INPUTS} inputs)"
        )

    def inputs(self) -> list[str | tuple[int, ...]]:
        """The inputs one by one: a list of ids is one input, a list of lists several."""
        value = self.input
        if isinstance(value, str):
            return [value]
        out: list[str | tuple[int, ...]] = []
        ids: list[int] = []
        for item in value:
            if isinstance(item, int):
                ids.append(item)
            else:
                out.append(item if isinstance(item, str) else tuple(item))
        return [tuple(ids)] if ids else out


def _is_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class Embedding(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str = Field(description="Floats, or base64 of float32 bytes.")


class EmbeddingUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class CreateEmbeddingResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[Embedding]
    model: str
    usage: EmbeddingUsage
