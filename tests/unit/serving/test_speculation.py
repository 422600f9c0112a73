"""Which requests a speculation serves, and what happens to the others."""

from __future__ import annotations

import asyncio
from typing import Any

from gateway.engines.backend import Grammar, SamplingParams, TokenEvent
from gateway.metrics import GatewayMetrics
from gateway.serving.speculation import Speculation, Speculator, serves

GREEDY = SamplingParams(temperature=0)
SEEDED = SamplingParams(temperature=0.7, top_p=0.9, seed=5)


def test_only_plain_requests_with_its_sampling_longer_than_the_speculation_are_served() -> None:
    assert serves(SamplingParams(temperature=0, max_tokens=None), GREEDY, 16)
    assert serves(SamplingParams(temperature=0, max_tokens=17), GREEDY, 16)
    assert not serves(SamplingParams(temperature=0, max_tokens=16), GREEDY, 16)
    assert not serves(SamplingParams(temperature=0.7), GREEDY, 16)
    assert not serves(SamplingParams(temperature=0, stop=("\n",)), GREEDY, 16)
    assert not serves(SamplingParams(temperature=0, logprobs=2), GREEDY, 16)
    assert not serves(
        SamplingParams(temperature=0, grammar=Grammar("lark", "start: /a/")), GREEDY, 16
    )
    assert not serves(SamplingParams(temperature=0, presence_penalty=0.5), GREEDY, 16)
    # Seeded: the same temperature, top_p, top_k and seed draw the same tokens.
    assert serves(SamplingParams(temperature=0.7, top_p=0.9, seed=5), SEEDED, 16)
    assert not serves(SamplingParams(temperature=0.7, top_p=0.9, seed=6), SEEDED, 16)
    assert not serves(SamplingParams(temperature=0.7, top_p=0.9), SEEDED, 16)
    assert not serves(SamplingParams(temperature=0.8, top_p=0.9, seed=5), SEEDED, 16)
    assert not serves(SamplingParams(temperature=0.7, top_p=1.0, seed=5), SEEDED, 16)
    assert not serves(SamplingParams(temperature=0.7, top_p=0.9, seed=5, top_k=3), SEEDED, 16)
    assert not serves(SamplingParams(temperature=0), SEEDED, 16)


def take(speculator: Speculator, *args: Any) -> Speculation | None:
    return asyncio.run(speculator.take(*args))


def speculator_with(speculation: Speculation) -> tuple[Speculator, GatewayMetrics]:
    metrics = GatewayMetrics()
    speculator = Speculator(metrics, 0.6, 16)
    speculator.by_hint[speculation.hint_id] = speculation
    return speculator, metrics


def count(metrics: GatewayMetrics, event: str) -> float:
    return metrics.speculations.labels(event)._value.get()


def done(prompt: tuple[int, ...]) -> Speculation:
    events = [TokenEvent("Hi", (7,)), TokenEvent(" there", (8,))]
    return Speculation("h1", "default", "s", prompt, events, complete=True)


def test_a_matching_request_takes_it_once() -> None:
    speculator, metrics = speculator_with(done((1, 2, 3)))
    taken = take(speculator, "default", [1, 2, 3], SamplingParams(temperature=0), "s")
    assert taken is not None and taken.token_ids == (7, 8)
    assert take(speculator, "default", [1, 2, 3], SamplingParams(temperature=0), "s") is None
    assert count(metrics, "used") == 1
    assert metrics.speculated_tokens_served._value.get() == 2


def test_other_prompts_sampling_or_an_unfinished_one_are_discarded_by_reason() -> None:
    for prompt, params, reason in [
        ([1, 2, 4], SamplingParams(temperature=0), "mismatch"),
        ([1, 2, 3], SamplingParams(temperature=1.0, seed=1), "sampling"),
    ]:
        speculator, metrics = speculator_with(done((1, 2, 3)))
        assert take(speculator, "default", prompt, params, "s") is None
        assert count(metrics, f"discarded_{reason}") == 1
    unfinished = Speculation("h1", "default", "s", (1, 2, 3))
    speculator, metrics = speculator_with(unfinished)
    assert take(speculator, "default", [1, 2, 3], SamplingParams(temperature=0), "s") is None
    assert count(metrics, "discarded_incomplete") == 1
    # Another session's speculation is left alone.
    speculator, _ = speculator_with(done((1, 2, 3)))
    assert take(speculator, "default", [1, 2, 3], SamplingParams(temperature=0), "other") is None
    assert "h1" in speculator.by_hint
