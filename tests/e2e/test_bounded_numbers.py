"""Issue 19's "Done when" row: a float field under a schema finishes. 50 runs of
``chat.completions.parse`` at temperature 0.7 (seeds 0-49) on the real model: at least 49
finish ``stop`` and parse (numbers have bounded digits: gateway.seam.grammar)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from testsupport.process import RunningGateway

MODEL = "smollm2-135m-instruct"
RUNS = 50


class Sentiment(BaseModel):
    label: Literal["positive", "negative", "neutral"]
    score: float


def test_fifty_seeded_parses_finish_and_parse(gateway: RunningGateway) -> None:
    client = gateway.openai()
    finished = 0
    failures: list[str] = []
    for seed in range(RUNS):
        completion = client.chat.completions.parse(
            model=MODEL,
            messages=[{"role": "user", "content": "Rate the sentiment of: the food was great."}],
            response_format=Sentiment,
            temperature=0.7,
            seed=seed,
            max_tokens=100,
        )
        choice = completion.choices[0]
        if choice.finish_reason == "stop" and isinstance(choice.message.parsed, Sentiment):
            finished += 1
        else:
            failures.append(f"seed {seed}: {choice.finish_reason} {choice.message.content!r}")
    print(f"{finished}/{RUNS} finished stop and parsed")
    assert finished >= RUNS - 1, failures
