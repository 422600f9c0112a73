"""A job's sampler: its own seeded key, and a resumed one that draws as the uninterrupted would."""

from __future__ import annotations

import mlx.core as mx

from gateway.engines.sampling import make_job_sampler
from gateway.seam.backend import SamplingParams

PARAMS = SamplingParams(temperature=1.0, top_p=0.95, seed=42)


def draws(sampler: object, count: int, logits: mx.array) -> list[int]:
    return [int(sampler(logits).item()) for _ in range(count)]  # type: ignore[operator]


def test_a_resumed_sampler_continues_the_same_draws() -> None:
    logits = mx.log(mx.softmax(mx.random.normal((1, 64), key=mx.random.key(0)), axis=-1))
    whole = draws(make_job_sampler(PARAMS), 12, logits)
    assert len(set(whole)) > 3  # really sampling, not always the same token
    for done in (1, 5, 11):
        resumed = draws(make_job_sampler(PARAMS, draws_done=done), 12 - done, logits)
        assert resumed == whole[done:], done
    # Another seed draws otherwise.
    other = draws(
        make_job_sampler(SamplingParams(temperature=1.0, top_p=0.95, seed=43)), 12, logits
    )
    assert other != whole
