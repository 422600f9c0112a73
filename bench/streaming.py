"""One streamed chat completion, timed as a client sees it: the benchmarks' common probe."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx


@dataclass
class Streamed:
    started: float
    times: list[float] = field(default_factory=list)  # when each chunk with text arrived
    pieces: list[str] = field(default_factory=list)
    usage: dict[str, Any] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    @property
    def ttft(self) -> float:
        assert self.times, "no token received"
        return self.times[0] - self.started

    @property
    def decode(self) -> float:
        """Tokens/s from the first text chunk to the last (one chunk per token)."""
        span = self.times[-1] - self.times[0] if len(self.times) > 1 else 0.0
        return (len(self.times) - 1) / span if span > 0 else 0.0

    @property
    def decode_tokens(self) -> float:
        """Tokens/s from the first text chunk to the last, counting the tokens the usage
        reports (tokens without text of their own included); ``decode`` without usage."""
        completion = int(self.usage.get("completion_tokens", 0))
        span = self.times[-1] - self.times[0] if len(self.times) > 1 else 0.0
        if completion < len(self.times) or span <= 0:
            return self.decode
        return (completion - 1) / span


def stream_chat(
    client: httpx.Client, body: dict[str, Any], path: str = "/v1/chat/completions"
) -> Streamed:
    """POST ``body`` as a streamed chat completion (OpenAI's SSE) and time its chunks."""
    result = Streamed(time.perf_counter())
    with client.stream("POST", path, json={**body, "stream": True}) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            if chunk.get("choices") and chunk["choices"][0]["delta"].get("content"):
                result.times.append(time.perf_counter())
                result.pieces.append(chunk["choices"][0]["delta"]["content"])
            if chunk.get("usage"):
                result.usage = chunk["usage"]
    return result
