"""Backends in front of another: ``WrappedBackend`` forwards the whole seam, and
``continued`` resumes a generation after tokens produced elsewhere.

The peers' dispatch (``generate`` may go to a peer) and the distributed tier's readiness gate
(``generate`` waits for the cluster) are two such wrappers; each overrides only what it
changes, and the optional parts (``warmer()``, ``embedder()``) stay the wrapped backend's.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from dataclasses import replace

from gateway.seam.backend import (
    Backend,
    BackendEvent,
    BackendHealth,
    BackendInfo,
    Embedder,
    GenerationRequest,
    ModelLimits,
    Prompt,
    Started,
    TextPrompt,
    Warmer,
)
from gateway.seam.request_parts import ChatMessage, ToolSpec

__all__ = ["WrappedBackend", "continued"]


class WrappedBackend:
    """A backend in front of another (``inner``): everything is the inner one's until a
    subclass says otherwise (``info`` too, unless it passes its own)."""

    def __init__(self, inner: Backend, info: BackendInfo | None = None) -> None:
        self.inner = inner
        self.info = info if info is not None else inner.info

    def limits(self) -> ModelLimits:
        return self.inner.limits()

    async def render(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec] = (),
        thinking: bool | None = None,
    ) -> Prompt:
        return await self.inner.render(messages, tools, thinking)

    async def render_text(self, prompt: TextPrompt) -> Prompt:
        return await self.inner.render_text(prompt)

    def generate(self, request: GenerationRequest) -> AsyncGenerator[BackendEvent, None]:
        return self.inner.generate(request)

    async def abort(self, request_id: str) -> bool:
        return await self.inner.abort(request_id)

    async def health(self) -> BackendHealth:
        return await self.inner.health()

    async def close(self) -> None:
        await self.inner.close()

    def warmer(self) -> Warmer | None:
        return self.inner.warmer()

    def embedder(self) -> Embedder | None:
        return self.inner.embedder()


async def continued(
    backend: Backend, request: GenerationRequest, tokens: tuple[int, ...]
) -> AsyncGenerator[BackendEvent, None]:
    """The events after completion ``tokens`` produced elsewhere (a failed peer, a
    speculation): ``request`` resumed after them, without a second ``Started``."""
    async for event in backend.generate(replace(request, resume=tokens)):
        if not isinstance(event, Started):
            yield event
