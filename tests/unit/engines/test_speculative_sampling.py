"""Sampling stays exact under speculation: on a small random-weight Llama (mlx-lm's own class)
with an 8-token vocabulary, the first three tokens of 2,000 seeded generations, drafted by a
second random model (its guesses mostly wrong, some right), follow the model's own
distribution, computed exactly by enumerating every prefix. So do 2,000 without drafting;
and samples at another temperature do not (the test can fail)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable

import mlx.core as mx
import pytest
from mlx_lm.models import llama
from mlx_lm.models.cache import make_prompt_cache

from gateway.engines.draft_model import DraftModel
from gateway.engines.drafting import DraftPolicy
from gateway.engines.mlx_decode import DecodeLoop
from gateway.engines.pass_timing import PassTiming
from gateway.engines.sampling import make_job_sampler
from gateway.seam.backend import SamplingParams

VOCAB = 8
SAMPLES = 2000
PROMPT = [1, 2, 3, 4, 5]
LENGTH = 3


def tiny_llama(seed: int) -> llama.Model:
    mx.random.seed(seed)
    args = llama.ModelArgs(
        model_type="llama",
        hidden_size=32,
        num_hidden_layers=2,
        intermediate_size=64,
        num_attention_heads=4,
        rms_norm_eps=1e-5,
        vocab_size=VOCAB,
        num_key_value_heads=4,
    )
    model = llama.Model(args)  # the first three tokens: top outcome ~0.14, many rare
    mx.eval(model.parameters())
    return model


def exact_distribution(model: llama.Model, temperature: float) -> dict[tuple[int, ...], float]:
    """P(t1, t2, t3) by the chain rule, each factor from one pass over the prefix."""

    def next_probs(prefix: list[int]) -> list[float]:
        logits = model(mx.array(prefix)[None])[0, -1].astype(mx.float32)
        probs: list[float] = mx.softmax(logits / temperature).tolist()  # type: ignore[assignment]
        return probs

    joint: dict[tuple[int, ...], float] = {}
    first = next_probs(PROMPT)
    for a in range(VOCAB):
        second = next_probs([*PROMPT, a])
        for b in range(VOCAB):
            third = next_probs([*PROMPT, a, b])
            for c in range(VOCAB):
                joint[(a, b, c)] = first[a] * second[b] * third[c]
    return joint


def loop_for(model: llama.Model, seed: int, draft: llama.Model | None) -> DecodeLoop:
    """A decode loop of ``model`` at temperature 1 with ``seed``, drafted by ``draft``."""
    timing = PassTiming("cpu", 64)
    timing.seconds_per_step = 1.0  # drafting always pays, as far as the policy can tell
    drafting = (DraftModel(draft), DraftPolicy(4)) if draft is not None else None
    return DecodeLoop(
        model,
        make_prompt_cache(model),
        timing,
        make_job_sampler(SamplingParams(temperature=1.0, seed=seed)),
        lambda fed: [],
        [],
        list(PROMPT),
        drafting,
    )


def sample(model: llama.Model, seed: int, draft: llama.Model | None) -> tuple[int, ...]:
    loop = loop_for(model, seed, draft)
    steps = loop.tokens(list(PROMPT), LENGTH)
    tokens = tuple(step[0] for step in steps if isinstance(step, tuple))
    if draft is not None:
        assert loop.drafted is not None
    return tokens


def chi_square_rejects(counts: Counter, expected: dict[tuple[int, ...], float]) -> bool:
    """Pearson's test at p = 0.001, cells expected fewer than 5 times pooled into one; the
    critical value by Wilson and Hilferty's approximation (no SciPy here)."""
    statistic, pooled_observed, pooled_expected, cells = 0.0, 0, 0.0, 0
    for outcome, probability in expected.items():
        wanted = probability * SAMPLES
        if wanted < 5:
            pooled_observed += counts.get(outcome, 0)
            pooled_expected += wanted
            continue
        statistic += (counts.get(outcome, 0) - wanted) ** 2 / wanted
        cells += 1
    if pooled_expected > 0:
        statistic += (pooled_observed - pooled_expected) ** 2 / pooled_expected
        cells += 1
    df = cells - 1
    z = 3.09  # the standard normal's 0.999 quantile
    critical = df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3
    return statistic > critical


@pytest.fixture(scope="module")
def models() -> tuple[llama.Model, llama.Model]:
    return tiny_llama(1), tiny_llama(2)


def drawn(draw: Callable[[int], tuple[int, ...]]) -> Counter:
    return Counter(draw(seed) for seed in range(SAMPLES))


def test_drafted_samples_follow_the_models_distribution(
    models: tuple[llama.Model, llama.Model],
) -> None:
    model, draft = models
    expected = exact_distribution(model, 1.0)
    assert sum(expected.values()) == pytest.approx(1.0, abs=1e-4)
    with_drafts = drawn(lambda seed: sample(model, seed, draft))
    without = drawn(lambda seed: sample(model, seed, None))
    assert not chi_square_rejects(with_drafts, expected)
    assert not chi_square_rejects(without, expected)
    # Seeded, draw for draw: the same tokens with and without drafting.
    assert all(
        sample(model, seed, draft) == sample(model, seed, None) for seed in range(0, SAMPLES, 97)
    )
    # And the test has power: another temperature's distribution is told apart.
    assert chi_square_rejects(with_drafts, exact_distribution(model, 0.7))


def test_the_draft_is_sometimes_right_and_sometimes_wrong(
    models: tuple[llama.Model, llama.Model],
) -> None:
    """The draft exercises both halves of the rule: guesses accepted and rejected."""
    model, draft = models
    accepted = drafted = 0
    for seed in range(200):
        loop = loop_for(model, seed, draft)
        for _ in loop.tokens(list(PROMPT), LENGTH):
            pass
        assert loop.drafted is not None
        accepted += loop.drafted.accepted
        drafted += loop.drafted.drafted
    assert 0 < accepted < drafted
