"""Samplers that own their random state, so interleaved jobs stay reproducible.

mlx-lm's ``make_sampler`` draws from MLX's global random state; when the scheduler interleaves
jobs (preemption, pre-prefill between requests) one job's draws would shift another's. Each
job's sampler here carries its own key, split once per token.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence

import mlx.core as mx
from mlx_lm.sample_utils import apply_top_k, apply_top_p, greedy_sampler, make_logits_processors

from gateway.seam.backend import SamplingParams

Sampler = Callable[[mx.array], mx.array]
# OpenAI's penalties look at the whole completion so far; mlx-lm's look at a window.
PENALTY_CONTEXT_TOKENS = 1024
# The repetition penalty's window: llama.cpp's and Ollama's repeat_last_n.
REPETITION_CONTEXT_TOKENS = 64


def make_job_sampler(params: SamplingParams, draws_done: int = 0) -> Sampler:
    """A sampler for one job: greedy at temperature 0, else seeded categorical with top-k
    and top-p (in that order, as vLLM and llama.cpp apply them).

    ``draws_done``: tokens of this completion already drawn elsewhere (a speculation, a peer
    that failed over); the key is split as many times, so that the next draw is the one an
    uninterrupted generation with the same seed would make.
    """
    if params.temperature == 0:
        return greedy_sampler
    seed = params.seed if params.seed is not None else secrets.randbits(63)
    key = mx.random.key(seed % 2**64)  # OpenAI seeds are signed 64-bit; MLX keys unsigned
    for _ in range(draws_done):
        key, _draw = mx.random.split(key)
    inverse_temperature = 1.0 / params.temperature
    top_p, top_k = params.top_p, params.top_k

    def sample(logprobs: mx.array) -> mx.array:
        nonlocal key
        key, draw = mx.random.split(key)
        if 0 < top_k < logprobs.shape[-1]:
            logprobs = apply_top_k(logprobs, top_k)
        if 0.0 < top_p < 1.0:
            logprobs = apply_top_p(logprobs, top_p)
        return mx.random.categorical(logprobs * inverse_temperature, key=draw)

    return sample


def make_job_logits_processors(
    params: SamplingParams, prompt_tokens_fed: int, carried: Sequence[int] = ()
) -> list[Callable[[mx.array, mx.array], mx.array]]:
    """Presence/frequency/repetition penalties and logit bias, built by mlx-lm.

    mlx-lm hands its processors every token fed so far, prompt included; OpenAI's penalties
    count only the completion. Cutting off the ``prompt_tokens_fed`` also keeps the output
    independent of how much of the prompt came from a cache. ``carried``: the completion's
    tokens generated elsewhere (a served speculation, a failed-over peer), at the prompt's
    end: the penalties see them first, as an uninterrupted generation's would.
    """
    processors = make_logits_processors(
        logit_bias=params.logit_bias or None,
        repetition_penalty=params.repetition_penalty,
        repetition_context_size=REPETITION_CONTEXT_TOKENS,
        presence_penalty=params.presence_penalty or None,
        presence_context_size=PENALTY_CONTEXT_TOKENS,
        frequency_penalty=params.frequency_penalty or None,
        frequency_context_size=PENALTY_CONTEXT_TOKENS,
    )

    def completion_only(
        processor: Callable[[mx.array, mx.array], mx.array],
    ) -> Callable[[mx.array, mx.array], mx.array]:
        if not carried:
            return lambda tokens, logits: processor(tokens[prompt_tokens_fed:], logits)
        before = mx.array(list(carried))
        return lambda tokens, logits: processor(
            mx.concatenate([before, tokens[prompt_tokens_fed:]]), logits
        )

    return [completion_only(p) for p in processors]
