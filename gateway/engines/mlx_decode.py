"""The decode loop: a fork of mlx-lm's ``generate_step`` (mlx_lm/generate.py, mlx-lm 0.32).

Kept from it: the pass on mlx-lm's ``generation_stream``, logits processors fed the tokens
so far, log-probabilities normalized before sampling, each step queued while the one before
still computes (``mx.async_eval``, so the device never waits for Python), one step past the
last token (it feeds that token into the cache, which the prefix store then holds), and
``mx.clear_cache()`` every 256 steps. ``tests/unit/engines/test_mlx_pacing.py`` checks that
greedy tokens are ``generate_step``'s.

What differs, and why:

1. The first token comes from one pass over the uncached prompt (the runner prefills the
   whole chunks before it). ``generate_step`` prefills all but the last prompt token and
   runs that one alone: one more pass before the first token, which on a long cached
   context costs a decode step's worth of attention.
2. Each job has its own sampler and processors (``gateway.engines.sampling``: seeded keys of
   its own, penalties over the completion only); a grammar's mask and a reasoning budget
   come last.
3. The scheduler paces the loop (``gateway.engines.pass_timing``): a step is queued ahead
   only when it says so, and a long pass is computed in groups of layers with a
   ``PASS_POINT`` between them, where the job may be paused.
4. Speculative decoding (``gateway.engines.drafting``): where a drafter guesses the next
   tokens, one pass over the pending token and the guess verifies them all; the agreeing
   prefix and the model's own next token are kept, and the cache is trimmed of the rest.
   As in mlx-lm's ``speculative_generate_step``, but each position is sampled in order and
   only up to the first disagreement: the sampler draws once per token kept, and a
   grammar, a penalty or a reasoning budget sees exactly the tokens kept. A token is kept
   only where the model's own sample equals the guess, so the output is the model's (with
   a seed, the same tokens as without drafting: draw k is the k-th token's either way).
5. Batched decode (``gateway.engines.batch_decode``): while other sequences of the same
   model decode too, the loop takes its tokens from the batch's steps (one pass for all,
   each row drawn by its own loop's ``draw``, the next pass queued by the batch), neither
   drafting nor queueing a step of its own.
6. A step's pass (and a draft's verifying pass) is compiled where the model takes it
   (``gateway.engines.compiled_step``): traced once per KV buffer size, replayed after.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Generator, Sequence
from typing import Any

import mlx.core as mx
from mlx_lm.generate import generation_stream
from mlx_lm.models.cache import KVCache as PlainKVCache
from mlx_lm.models.cache import can_trim_prompt_cache, trim_prompt_cache
from mlx_lm.sample_utils import greedy_sampler

from gateway.engines.batch_decode import BatchDecoder, Pending
from gateway.engines.compiled_step import CompiledStep
from gateway.engines.drafting import Drafter, DraftPolicy
from gateway.engines.pass_points import pass_points
from gateway.engines.pass_timing import PassTiming
from gateway.engines.runner import KVCache
from gateway.scheduler.pacing import PassPoint
from gateway.seam.backend import Drafted

Processor = Callable[[mx.array, mx.array], mx.array]
Sampler = Callable[[mx.array], mx.array]
# What the loop yields: a token and the log-probabilities it was drawn from, or a point
# inside a pass where the job may be paused.
DecodeStep = tuple[int, mx.array] | PassPoint
CLEAR_CACHE_STEPS = 256


class DecodeLoop:
    """One generation's tokens after its whole prompt chunks: the first from a pass over
    the rest of the prompt, then one per step, or several per verified draft."""

    def __init__(
        self,
        model: Any,
        cache: KVCache,
        timing: PassTiming,
        sampler: Sampler,
        penalties: Callable[[int], list[Processor]],
        last: Sequence[Processor],
        history: list[int],
        drafting: tuple[Drafter, DraftPolicy] | None = None,
        batch: BatchDecoder | None = None,
        compiled: CompiledStep | None = None,
    ) -> None:
        self.model = model
        self.cache = cache
        self.timing = timing
        self.sampler = sampler
        # ``penalties(n)``: presence/frequency penalties and logit bias over the tokens
        # fed after the first n (``make_job_logits_processors``); ``last``: a reasoning
        # budget and a grammar's mask, which see every token in order.
        self.penalties = penalties
        self.last = list(last)
        self.processors = [*penalties(0), *self.last]  # for the completion's tokens
        # The prompt and every token yielded so far: what a drafter continues.
        self.history = history
        self.drafter: Drafter | None = drafting[0] if drafting is not None else None
        self.policy: DraftPolicy | None = drafting[1] if drafting is not None else None
        self._seen: mx.array | None = None  # the completion fed so far, as processors see it
        # Plain KV caches can always be trimmed: asked once, not at every step (a rotating
        # cache can be only until it wraps: asked at each step).
        self._always_trimmable = all(type(c) is PlainKVCache for c in cache)
        # A step's pass, compiled (plain caches only: the only kind it writes).
        self.compiled = compiled if self._always_trimmable else None
        self._steps = 0
        # The batch of this model's decoding sequences, and the tokens its steps drew for
        # this one that it has not yielded yet (``gateway.engines.batch_decode``).
        self.batch = batch
        self.ready: deque[Pending] = deque()

    @property
    def drafted(self) -> Drafted | None:
        """What drafting did in this generation (None: it was off, or never drafted)."""
        if self.drafter is None or self.policy is None or not self.policy.counts.drafted:
            return None
        counts = self.policy.counts
        return Drafted(self.drafter.method, counts.drafted, counts.accepted)

    def tokens(self, uncached: list[int], max_tokens: int) -> Generator[DecodeStep, None, None]:
        """Up to ``max_tokens`` tokens, the first from one pass over ``uncached``."""
        fed = mx.array(uncached)
        logits = self.model(fed[None], cache=self.cache)[:, -1, :]
        yield from pass_points(self.cache, self.timing.pass_stages(uncached))
        # The completion so far is empty: the penalties count none of the tokens fed.
        for processor in [*self.penalties(len(uncached)), *self.last]:
            logits = processor(fed, logits)
        logprobs = logits - mx.logsumexp(logits, keepdims=True)
        first = int(self.sampler(logprobs).item())  # type: ignore[arg-type]
        self.history.append(first)
        yield first, logprobs[0]
        if max_tokens > 1:
            try:
                yield from self._decode(first, max_tokens - 1)
            finally:
                self.set_aside()
                if self.drafter is not None:
                    self.drafter.finish()

    @property
    def plain_greedy(self) -> bool:
        """Whether its draw is the argmax of its logits and nothing else: a batch draws such
        rows together."""
        return not self.processors and self.sampler is greedy_sampler

    def set_aside(self) -> None:
        """Stop decoding in the batch (the job ended or is paused): the rows go back into
        this loop's own cache. It joins again at its next step."""
        if self.batch is not None:
            self.batch.leave(self)

    def _batched(self, queued: object) -> bool:
        """Whether the next token comes from the batch: no step of its own in flight, and
        another sequence decodes beside it (or the batch drew tokens for it already)."""
        batch = self.batch
        if batch is None or queued is not None:
            return False
        return batch.enter(self) and batch.crowded(self)

    def _decode(self, pending: int, count: int) -> Generator[DecodeStep, None, None]:
        """``count`` tokens after ``pending`` (sampled, not yet fed): a verified draft where
        the drafter has one, else a step, queued while the one before still computes —
        unless the scheduler says not to (``Pacing.decode_ahead``: a job about to pause), a
        step is computed in groups of layers, or the next token is to be drafted from
        (its value is needed first). A job paused at a token then leaves nothing computing
        behind it."""
        timing = self.timing
        queued: tuple[mx.array, mx.array] | None = None  # a step for ``pending``, in flight
        # A step's compute: the inference thread's time between two tokens read, less the
        # time it spent suspended at a yield (a pause, the scheduler's hand-over).
        read_at, suspended = time.perf_counter(), 0.0
        while count > 0:
            if self._batched(queued):
                assert self.batch is not None
                token, logprobs = yield from self.batch.next(self, pending)
                self.history.append(token)
                yield token, logprobs
                read_at, suspended = time.perf_counter(), 0.0
                pending, count = token, count - 1
                continue
            looked_up = False
            if queued is None and self._may_draft():
                assert self.drafter is not None
                # The draft's cost is the guessing (a draft model's steps) and the pass.
                started = time.perf_counter()
                draft = self.drafter.propose(self.history, min(self._length(), count - 1))
                looked_up = True
                if draft:
                    kept = yield from self._verify(pending, draft, started)
                    pending, count = kept[-1], count - len(kept)
                    read_at, suspended = time.perf_counter(), 0.0
                    continue
            if self.policy is not None:
                self.policy.stepped(looked_up)
            if queued is None:
                queued, paused = yield from self._queued(mx.array([pending]))
                suspended += paused
            ahead = None
            if timing.decode_ahead() and not self._may_draft() and not self._others_decode():
                ahead = self._step(queued[0])
                mx.async_eval(*ahead)
            token = int(queued[0].item())  # type: ignore[arg-type]
            now = time.perf_counter()
            timing.note_step(now - read_at - suspended)
            self.history.append(token)
            yield token, queued[1]
            read_at, suspended = now, time.perf_counter() - now
            count -= 1
            self._steps += 1
            if self._steps % CLEAR_CACHE_STEPS == 1:
                mx.clear_cache()
            pending, queued = token, ahead

    def _others_decode(self) -> bool:
        """Whether other sequences decode beside this one (its next token will come from
        the batch: no step of its own is queued ahead)."""
        return self.batch is not None and self.batch.crowded(self)

    def _may_draft(self) -> bool:
        """Whether the next token may come from a draft: a drafter that is not resting, a
        step's pace known to weigh a draft against, and a cache that can be trimmed."""
        policy = self.policy
        return (
            policy is not None
            and policy.drafting
            and not self._others_decode()
            and self.timing.seconds_per_step is not None
            and (self._always_trimmable or can_trim_prompt_cache(self.cache))
        )

    def _length(self) -> int:
        assert self.policy is not None
        return self.policy.length

    def _step(self, token: mx.array) -> tuple[mx.array, mx.array]:
        with mx.stream(generation_stream):
            if self.compiled is not None:
                logits = self.compiled(token, self.cache)
            else:
                logits = self.model(token[None], cache=self.cache)[:, -1, :]
            return self.draw(token, logits)

    def draw(self, token: mx.array, logits: mx.array) -> tuple[mx.array, mx.array]:
        """The next token after ``token`` from this sequence's ``logits`` row (its
        processors, then its sampler), lazily, with the log-probabilities it came from."""
        logits = self._processed(token, logits)
        logprobs = logits - mx.logsumexp(logits, keepdims=True)
        return self.sampler(logprobs), logprobs.squeeze(0)

    def _processed(self, token: mx.array, logits: mx.array) -> mx.array:
        if self.processors:
            self._seen = token if self._seen is None else mx.concat([self._seen, token])
            for processor in self.processors:
                logits = processor(self._seen, logits)
        return logits

    def _queued(
        self, token: mx.array
    ) -> Generator[PassPoint, None, tuple[tuple[mx.array, mx.array], float]]:
        pass_ = self._step(token)
        suspended = yield from pass_points(self.cache, self.timing.step_stages())
        mx.async_eval(*pass_)
        return pass_, suspended

    def _verify(
        self, pending: int, draft: list[int], started: float
    ) -> Generator[DecodeStep, None, list[int]]:
        """One pass over ``pending`` and ``draft``: the draft's agreeing prefix and the
        model's next token are yielded, the rest is trimmed from the cache. Returns the
        tokens yielded (the last sampled, not yet fed)."""
        assert self.policy is not None
        inputs = [pending, *draft]
        with mx.stream(generation_stream):
            if self.compiled is not None:
                logits = self.compiled(mx.array(inputs), self.cache)
            else:
                logits = self.model(mx.array(inputs)[None], cache=self.cache)[0]
        suspended = yield from pass_points(self.cache, self.timing.pass_stages(inputs))
        kept = self._kept_tokens(inputs, draft, logits)
        accepted = len(kept) - 1
        trim_prompt_cache(self.cache, len(draft) - accepted)
        seconds = time.perf_counter() - started - suspended
        step_seconds = self.timing.seconds_per_step or 0.0
        guess = self.drafter.seconds_per_guess if self.drafter is not None else None
        self.policy.verified(len(draft), accepted, seconds, step_seconds, guess)
        tokens = [token for token, _ in kept]
        # All at once, before the first is yielded: the cache holds the draft's agreeing
        # prefix already, and a job paused at one of these tokens is restored from here.
        self.history.extend(tokens)
        yield from kept
        return tokens

    def _kept_tokens(
        self, inputs: list[int], draft: list[int], logits: mx.array
    ) -> list[tuple[int, mx.array]]:
        """The model's token at each position of the verifying pass, up to the first that
        differs from the draft (included: it is the model's own next token)."""
        kept: list[tuple[int, mx.array]] = []
        if not self.processors and self.sampler is greedy_sampler:
            # Nothing depends on the order: every position at once, one read.
            logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
            picks: list[int] = mx.argmax(logits, axis=-1).tolist()  # type: ignore[assignment]
            for position, pick in enumerate(picks):
                kept.append((pick, logprobs[position]))
                if position == len(draft) or pick != draft[position]:
                    break
            return kept
        for position, fed in enumerate(inputs):
            row = self._processed(mx.array([fed]), logits[position : position + 1])
            logprobs = row - mx.logsumexp(row, keepdims=True)
            pick = int(self.sampler(logprobs).item())  # type: ignore[arg-type]
            kept.append((pick, logprobs[0]))
            if position == len(draft) or pick != draft[position]:
                break
        return kept
