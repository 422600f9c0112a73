"""The tokens a chat used, in the gateway's own terms.

The chat service counts; each wire format says it in its own shape at its edge: OpenAI's
``usage`` (``openai_chat.openai_usage``), the Responses API's (``response_run``), Anthropic's
(``anthropic.anthropic_usage``). Nothing here knows a wire format.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TokenUsage:
    """A chat's tokens: the prompt's (``cached`` of them read from the prefix cache, not
    computed), the completion's, and where present the reasoning section's share of the
    completion and what speculative decoding drafted and the model accepted."""

    prompt: int
    completion: int
    cached: int = 0
    reasoning: int | None = None  # None: the reply has no reasoning section
    drafted: int | None = None  # None: nothing was drafted
    accepted: int | None = None  # of the drafted tokens, those the model accepted

    @property
    def total(self) -> int:
        return self.prompt + self.completion

    @property
    def computed(self) -> int:
        """The prompt's tokens computed here (not read from the cache)."""
        return max(self.prompt - self.cached, 0)
