"""A Responses stream on the wire: numbered in the order sent, and kept alive with events."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator

import pytest
from pydantic import BaseModel

from gateway.protocol.responses_events import (
    Response,
    ResponseCreatedEvent,
    ResponseInProgressEvent,
)
from gateway.routes import sse


def response() -> Response:
    return Response.model_validate(
        {
            "id": "resp_1",
            "created_at": 0,
            "status": "in_progress",
            "model": "m",
            "output": [],
            "parallel_tool_calls": False,
            "tool_choice": "auto",
            "tools": [],
            "temperature": 1.0,
            "top_p": 1.0,
            "text": {"format": {"type": "text"}},
            "store": True,
        }
    )


async def test_a_long_wait_is_filled_with_numbered_in_progress_events(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sse, "SSE_PING_SECONDS", 0.05)

    async def slow() -> AsyncGenerator[BaseModel, None]:
        yield ResponseCreatedEvent(sequence_number=0, response=response())
        yield ResponseInProgressEvent(sequence_number=1, response=response())
        await asyncio.sleep(0.3)  # a long prefill: nothing but keep-alives
        yield ResponseInProgressEvent(sequence_number=2, response=response())

    stream = sse.ServerSentEvents(slow(), "responses")
    frames = b"".join([m async for m in stream.iterator])  # type: ignore[attr-defined]
    events = [block for block in frames.decode().split("\n\n") if block.strip()]
    assert all(not block.startswith(":") for block in events)  # no comment-only pings
    data = [
        json.loads(line[6:]) for b in events for line in b.splitlines() if line.startswith("data: ")
    ]
    assert [d["sequence_number"] for d in data] == list(range(len(data)))
    assert len(data) >= 5 and {d["type"] for d in data[2:-1]} == {"response.in_progress"}
