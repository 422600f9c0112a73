"""Which requests a speculation serves, and what happens to the others."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

from gateway.metrics import GatewayMetrics, SpeculationMetrics
from gateway.seam.backend import (
    BackendEvent,
    Finished,
    GenerationRequest,
    Prompt,
    SamplingParams,
    Started,
    TokenEvent,
)
from gateway.seam.request_parts import Grammar
from gateway.serving.speculation import Speculation, Speculator, serves, speculated_events

GREEDY = SamplingParams(temperature=0)
SEEDED = SamplingParams(temperature=0.7, top_p=0.9, seed=5)


def test_only_plain_requests_with_its_sampling_are_served_whatever_their_max_tokens() -> None:
    assert serves(SamplingParams(temperature=0, max_tokens=None), GREEDY)
    assert serves(SamplingParams(temperature=0, max_tokens=17), GREEDY)
    assert serves(SamplingParams(temperature=0, max_tokens=16), GREEDY)
    assert serves(SamplingParams(temperature=0, max_tokens=1), GREEDY)
    assert not serves(SamplingParams(temperature=0.7), GREEDY)
    assert not serves(SamplingParams(temperature=0, stop=("\n",)), GREEDY)
    assert not serves(SamplingParams(temperature=0, logprobs=2), GREEDY)
    assert not serves(SamplingParams(temperature=0, grammar=Grammar("lark", "start: /a/")), GREEDY)
    assert not serves(SamplingParams(temperature=0, presence_penalty=0.5), GREEDY)
    # A repetition penalty (a tier's, on both) is part of the draws: the same one or none.
    penalized = SamplingParams(temperature=0, repetition_penalty=1.1)
    assert serves(penalized, penalized) and not serves(penalized, GREEDY)
    assert not serves(SamplingParams(temperature=0), penalized)
    # Seeded: the same temperature, top_p, top_k and seed draw the same tokens.
    assert serves(SamplingParams(temperature=0.7, top_p=0.9, seed=5), SEEDED)
    assert not serves(SamplingParams(temperature=0.7, top_p=0.9, seed=6), SEEDED)
    assert not serves(SamplingParams(temperature=0.7, top_p=0.9), SEEDED)
    assert not serves(SamplingParams(temperature=0.8, top_p=0.9, seed=5), SEEDED)
    assert not serves(SamplingParams(temperature=0.7, top_p=1.0, seed=5), SEEDED)
    assert not serves(SamplingParams(temperature=0.7, top_p=0.9, seed=5, top_k=3), SEEDED)
    assert not serves(SamplingParams(temperature=0), SEEDED)


def take(speculator: Speculator, *args: Any) -> Speculation | None:
    return asyncio.run(speculator.take(*args))


def speculator_with(speculation: Speculation) -> tuple[Speculator, SpeculationMetrics]:
    metrics = GatewayMetrics().speculation
    speculator = Speculator(metrics, 0.6, 16)
    speculator.by_hint[speculation.hint_id] = speculation
    return speculator, metrics


def count(metrics: SpeculationMetrics, event: str) -> float:
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


# -- a request shorter than the speculation (issue 23 item 2) ------------------------------------


class Continuation:
    """The backend after the speculated tokens: one more token, whose event carries the tail
    the detokenizer flushes at the end (what only a generation ending there computes)."""

    def __init__(self) -> None:
        self.requests: list[GenerationRequest] = []

    async def generate(self, request: GenerationRequest) -> AsyncGenerator[BackendEvent, None]:
        self.requests.append(request)
        done = len(request.resume)
        limit = request.params.max_tokens or 100
        yield Started(3, 3)
        yield TokenEvent(f" t{done}+tail", (100 + done,))
        yield Finished("length" if done + 1 == limit else "stop", 3, done + 1)


def sixteen(finished: Finished | None = None, count: int = 16) -> Speculation:
    events = [TokenEvent(f" t{i}", (100 + i,)) for i in range(count)]
    return Speculation("h1", "default", "s", (1, 2, 3), events, finished, complete=True)


def answer(speculation: Speculation, max_tokens: int | None) -> tuple[list[Any], Continuation]:
    backend = Continuation()
    request = GenerationRequest(
        id="r",
        messages=(),
        params=SamplingParams(temperature=0, max_tokens=max_tokens),
        prompt=Prompt((1, 2, 3)),
    )

    async def collect() -> list[Any]:
        return [e async for e in speculated_events(speculation, request, backend)]  # type: ignore[arg-type]

    return asyncio.run(collect()), backend


def texts(events: list[Any]) -> str:
    return "".join(e.text for e in events if isinstance(e, TokenEvent))


def test_a_shorter_request_gets_the_first_max_tokens_cut_with_length() -> None:
    events, backend = answer(sixteen(), 8)
    assert isinstance(events[0], Started) and events[0].cached_tokens == 3
    # Seven sent at once; the eighth is generated again from their KV cache, for its tail.
    assert [r.resume for r in backend.requests] == [tuple(range(100, 107))]
    assert texts(events) == "".join(f" t{i}" for i in range(7)) + " t7+tail"
    assert events[-1] == Finished("length", 3, 8)
    assert sum(len(e.token_ids) for e in events if isinstance(e, TokenEvent)) == 8


def test_an_answer_that_ended_within_max_tokens_is_sent_whole_with_stop() -> None:
    ended = Finished("stop", 3, 4, cached_tokens=3)  # three tokens and the end of turn
    events, backend = answer(sixteen(ended, count=3), 4)
    assert backend.requests == [] and events[-1] == ended
    assert texts(events) == " t0 t1 t2"
    # One token fewer than it took: cut, and the last one generated again.
    events, backend = answer(sixteen(ended, count=3), 3)
    assert [r.resume for r in backend.requests] == [(100, 101)]
    assert events[-1] == Finished("length", 3, 3)


def test_a_one_token_request_is_generated_from_the_cache() -> None:
    events, backend = answer(sixteen(), 1)
    assert [r.resume for r in backend.requests] == [()]
    assert texts(events) == " t0+tail" and events[-1] == Finished("length", 3, 1)


def test_a_longer_request_still_gets_all_sixteen_then_the_rest() -> None:
    events, backend = answer(sixteen(), 40)
    assert [r.resume for r in backend.requests] == [tuple(range(100, 116))]
    assert texts(events).startswith("".join(f" t{i}" for i in range(16)))


def test_taking_a_speculation_for_a_short_request_counts_what_is_served() -> None:
    speculator, metrics = speculator_with(sixteen())
    params = SamplingParams(temperature=0, max_tokens=8)
    assert take(speculator, "default", [1, 2, 3], params, "s") is not None
    assert count(metrics, "used") == 1
    assert metrics.speculated_tokens_served._value.get() == 7
