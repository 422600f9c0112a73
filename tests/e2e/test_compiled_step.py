"""The compiled decode step over HTTP (issue 32): a gateway whose tier compiles its steps (the
default) answers through the openai SDK exactly as one whose tier builds them eagerly, and
``/health`` says which each does."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.conftest import MODEL
from testsupport.process import RunningGateway, start_gateway

pytestmark = pytest.mark.e2e

# ~220 tokens of system prompt and 90 of reply: the KV buffer (256 after the prompt) grows
# while the compiled step writes it.
KEEPER = " ".join(f"Rule {n}: the keeper lights the lamp at dusk." for n in range(18))
POEM = "Write a poem about the sea, the wind and a lighthouse."
REQUESTS: list[dict[str, Any]] = [
    {
        "messages": [{"role": "system", "content": KEEPER}, {"role": "user", "content": POEM}],
        "max_tokens": 90,
    },
    {
        "messages": [{"role": "user", "content": "Describe a cat as JSON."}],
        "max_tokens": 60,
        "response_format": {"type": "json_object"},
    },
    {
        "messages": [{"role": "user", "content": "Name three rivers."}],
        "max_tokens": 40,
        "logprobs": True,
        "top_logprobs": 3,
    },
    {
        "messages": [{"role": "user", "content": "Tell me a story about a fox."}],
        "max_tokens": 50,
        "temperature": 0.8,
        "seed": 5,
    },
]


@pytest.fixture(scope="module")
def eager(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    tier = {"model": MODEL, "preload": True, "decode_step": "eager"}
    running = start_gateway(tmp_path_factory.mktemp("eager"), {"tiers": {"default": tier}})
    yield running
    running.stop()


def _answer(gateway: RunningGateway, request: dict[str, Any]) -> tuple[str, list[Any]]:
    body = {"temperature": 0, **request}
    reply = gateway.openai(timeout=300).chat.completions.create(model=MODEL, **body)
    choice = reply.choices[0]
    logprobs = choice.logprobs.content if choice.logprobs and choice.logprobs.content else []
    return choice.message.content or "", [
        (t.token, t.logprob, [(a.token, a.logprob) for a in t.top_logprobs]) for t in logprobs
    ]


def _same_logprobs(these: list[Any], those: list[Any]) -> bool:
    """The same tokens and alternatives, their log-probabilities within float32 rounding (a
    masked attention over the whole buffer sums in another order)."""
    if [(t, [a for a, _ in top]) for t, _, top in these] != [
        (t, [a for a, _ in top]) for t, _, top in those
    ]:
        return False
    values = [(p, [q for _, q in top]) for _, p, top in these]
    others = [(p, [q for _, q in top]) for _, p, top in those]
    return all(
        abs(p - o) < 1e-3 and all(abs(q - r) < 1e-3 for q, r in zip(qs, rs, strict=True))
        for (p, qs), (o, rs) in zip(values, others, strict=True)
    )


def _decode_step(gateway: RunningGateway) -> dict[str, Any]:
    health = gateway.http().get("/health").json()
    return dict(health["tiers"]["default"]["decode_step"])


def test_compiled_steps_answer_as_eager_ones(
    gateway: RunningGateway, eager: RunningGateway
) -> None:
    assert _decode_step(gateway) == {
        "compiled": True,
        "reason": "compiled",
        "batch_compiled": True,  # (max_sequences: 8 by default)
    }
    assert _decode_step(eager) == {
        "compiled": False,
        "reason": "eager: the tier's decode_step setting",
        "batch_compiled": False,
    }
    with_logprobs = 0
    for request in REQUESTS:
        compiled_text, compiled_logprobs = _answer(gateway, request)
        eager_text, eager_logprobs = _answer(eager, request)
        assert compiled_text and compiled_text == eager_text, request
        assert _same_logprobs(compiled_logprobs, eager_logprobs)
        with_logprobs += bool(compiled_logprobs)
    assert with_logprobs == 1  # compared, not both empty
