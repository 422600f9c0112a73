"""Tokens handed to the event loop in twos and threes (``scheduler.token_flush_seconds``, the
GPU's pace) stream exactly what a gateway that hands them over one by one streams."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testsupport.process import RunningGateway, start_gateway

MODEL = "smollm2-135m-instruct"
STORY = [{"role": "user", "content": "Tell me a short story about a lighthouse keeper."}]


@pytest.fixture(scope="module")
def paced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    # 100 ms: on this CPU (~40 ms a token) most tokens wait for the next one.
    config = {"scheduler": {"token_flush_seconds": 0.1}}
    running = start_gateway(Path(tmp_path_factory.mktemp("paced")), config)
    yield running
    running.stop()


def streamed(gateway: RunningGateway, **extra: Any) -> list[tuple[str, Any, Any]]:
    stream = gateway.openai().chat.completions.create(
        model=MODEL, messages=STORY, temperature=0, stream=True, **extra
    )
    return [
        (
            c.choices[0].delta.content or "",
            c.choices[0].finish_reason,
            [t.token for t in c.choices[0].logprobs.content] if c.choices[0].logprobs else None,
        )
        for c in stream
        if c.choices
    ]


@pytest.mark.parametrize(
    "extra",
    [
        {"max_tokens": 20},  # ends on length: the last token is not deferred past the end
        {"max_tokens": 40, "stop": ["keeper"]},  # ends on a stop string
        {"max_tokens": 12, "logprobs": True, "top_logprobs": 2},
    ],
)
def test_paced_stream_is_the_unpaced_stream(
    paced: RunningGateway, gateway: RunningGateway, extra: dict[str, Any]
) -> None:
    one_by_one = streamed(gateway, **extra)
    together = streamed(paced, **extra)
    assert together == one_by_one
    assert one_by_one[-1][1] in ("length", "stop")
    reply = paced.openai().chat.completions.create(
        model=MODEL, messages=STORY, temperature=0, **extra
    )
    assert "".join(text for text, _finish, _lp in together) == reply.choices[0].message.content
