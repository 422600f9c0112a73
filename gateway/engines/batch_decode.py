"""Batched decode: the sequences of one model decoding together, one pass for all per step.

Decoding reads every weight once per step whatever the batch (memory bandwidth is the
bound), so one pass over B sequences costs about what one over a single sequence does:
this is how the one inference slot decodes several sequences (issue 33), as mlx-lm's
``BatchGenerator`` and vLLM do. The KV caches are mlx-lm's own ``BatchKVCache``
(left-padded; ``merge``, ``extend``, ``extract`` and ``filter`` move sequences in and out).

Each sequence stays a ``DecodeLoop`` of its own (its sampler, seed, processors, grammar,
penalties and log-probabilities): the batch runs the model over all of them at once, then
samples each row with its own loop's sampler, in order. A sequence decodes alone (with
drafting and its steps queued ahead) while it is the only one decoding; once another
sequence of the same model decodes too, each joins the batch at its next step and leaves
it when it ends, is cancelled or is paused (its rows extracted back into its own cache
objects, so its ``PromptState``, a paused job's memory release and the prefix store see a
plain cache again). When one is left, the batch dissolves and it decodes alone again.

Steps are computed on demand: the first sequence to ask for a token that it has not got
computes a step for every joined sequence; the others find theirs ready. As a lone
sequence's loop does, the batch queues its next pass before the tokens of the last are read
(fed the draws still on the device: ``mx.async_eval``), so the device computes while the
host hands tokens on and builds the pass after; on a GPU only, and not where the scheduler
says a job is about to pause. The scheduler advances the jobs of a batch in turn (``gateway.scheduler.slot``),
one token each, so a sequence never holds more than a token or two.

A step is computed in groups of layers where the scheduler's pacing asks for it (as a
sequence's own step is: ``mlx_decode.pass_points``), with a ``PASS_POINT`` after each group
yielded by the sequence that asked for it: a user request arriving then pauses the
background batch inside the pass. Each sequence that leaves with the step unfinished takes
its draw along unevaluated (in its ``ready``); the rest of the pass is computed when one of
them reads it, after the user's work.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, Protocol

import mlx.core as mx
from mlx_lm.generate import generation_stream
from mlx_lm.models.cache import BatchKVCache
from mlx_lm.models.cache import KVCache as PlainKVCache

from gateway.engines.compiled_step import CompiledStep
from gateway.engines.pass_points import pass_points
from gateway.engines.pass_timing import PassTiming
from gateway.scheduler.pacing import PassPoint

# A token and the log-probabilities it was drawn from.
Drawn = tuple[int, mx.array]
# A draw not read yet: the token is still an array of the step's (maybe unfinished) pass;
# or why this sequence could not draw (its own processors failed).
Pending = tuple[int | mx.array, mx.array] | Exception


class DecodeLoop(Protocol):
    """What the batch asks of a sequence's own loop (``gateway.engines.mlx_decode``)."""

    cache: Any  # its KV cache: a list of mlx-lm cache objects, one per layer
    ready: deque[Pending]  # tokens the batch drew for it, not yet yielded

    @property
    def plain_greedy(self) -> bool:
        """Whether its draw is the argmax of its row and nothing else (no processors)."""
        ...

    def draw(self, token: mx.array, logits: mx.array) -> tuple[mx.array, mx.array]:
        """The next token after ``token`` from its ``logits`` row, lazily, with the
        log-probabilities it came from."""
        ...


# How far a batched step's logits may be from one sequence's alone, relative to their scale.
BATCH_TOLERANCE = 0.05


class BatchSeat:
    """A sequence's row in the batch: its loop and the token to feed it next (the tokens
    drawn for it but not yet taken wait in the loop's own ``ready``, which outlives the
    seat: a sequence paused or left alone takes them first)."""

    def __init__(self, loop: DecodeLoop, pending: int, length: int) -> None:
        self.loop = loop
        # Tokens its rows hold (each pass adds one): with the batch's length, where its
        # rows begin (their left padding), known here without reading the device.
        self.length = length
        # The token to feed at the next pass: an int, or the draw of the pass in flight.
        self.pending: int | mx.array = pending
        # Its draw of the pass in flight (or why it could not draw), not yet handed over.
        self.drawing: Pending | None = None


class BatchDecoder:
    """The batch of one model's decoding sequences (one per runner, on the inference thread).

    ``capacity`` bounds how many sequences decode together (the tier's memory budget and
    the configured cap, ``gateway.engines.footprint``); beyond it a sequence decodes alone
    between the batch's steps. ``steps`` and ``sequence_steps`` count the passes and the
    tokens they drew (their ratio is the mean batch size).
    """

    def __init__(
        self,
        model: Any,
        limit: BatchLimit,
        timing: PassTiming | None = None,
        queue_ahead: bool = True,
    ) -> None:
        self.model = model
        self.timing = timing
        # Whether a pass may be queued before the last one's tokens are read: on a GPU
        # (Metal, CUDA), not on a CPU, where the host's work and the pass share the cores
        # (8 SmolLM2 sequences on 2 cores: 55.2 tok/s queued ahead, 61.2 not;
        # ``ops/batch_queue_ahead.py``).
        self.queue_ahead = queue_ahead
        self.limit = limit
        self.capacity = limit.sequences
        self.decoding: list[DecodeLoop] = []  # every sequence that decodes now, in order
        self.seats: list[BatchSeat] = []  # those in the batch's cache, in its row order
        self.cache: list[BatchKVCache] | None = None
        self.steps = 0
        self.sequence_steps = 0
        self.passes_ahead = 0  # passes queued before the last one's tokens were read
        # Its passes, compiled where the model takes a batch so (``compiled_step``).
        self.compiled: CompiledStep | None = None

    # -- membership (called by the sequences' own loops) ----------------------------------

    def enter(self, loop: DecodeLoop) -> bool:
        """``loop`` begins (or resumes) decoding; False when its cache cannot be batched."""
        if loop in self.decoding:
            return True  # asked at every step: the cache's types were checked on entry
        if self.capacity < 2 or not all(type(c) is PlainKVCache for c in loop.cache):
            return False
        self.decoding.append(loop)
        return True

    def leave(self, loop: DecodeLoop) -> None:
        """``loop`` stops decoding (it ended, or its job is paused): its rows go back into
        its own cache; a batch left with one sequence dissolves (it decodes alone)."""
        if loop in self.decoding:
            self.decoding.remove(loop)
        seat = self._seat_of(loop)
        if seat is not None:
            self._extract([seat])
        if len(self.seats) == 1 and len(self.decoding) <= 1:
            self._extract(list(self.seats))

    def crowded(self, loop: DecodeLoop) -> bool:
        """Whether ``loop`` should take its tokens from the batch: another sequence decodes
        beside it, or the batch drew tokens for it that it has not taken yet."""
        if loop.ready:
            return True
        return loop in self.decoding and len(self.decoding) > 1 and self._has_room(loop)

    def next(self, loop: DecodeLoop, pending: int) -> Generator[PassPoint, None, Drawn]:
        """``loop``'s next token: ready already, or drawn by a step computed now for every
        sequence in the batch (``loop`` joins it first, feeding ``pending``); yields the
        points inside that step's pass where its job may be paused."""
        if not loop.ready:
            if self._seat_of(loop) is None:
                self._join(loop, pending)
            yield from self._step()
        drawn = loop.ready.popleft()
        if isinstance(drawn, Exception):
            raise drawn
        token, logprobs = drawn
        if not isinstance(token, int):
            token = int(token.item())  # type: ignore[arg-type]
        return token, logprobs

    @property
    def size(self) -> int:
        return len(self.seats)

    # -- the batch's cache -----------------------------------------------------------------

    def _has_room(self, loop: DecodeLoop) -> bool:
        return self._seat_of(loop) is not None or len(self.seats) < self.capacity

    def _seat_of(self, loop: DecodeLoop) -> BatchSeat | None:
        return next((seat for seat in self.seats if seat.loop is loop), None)

    def _join(self, loop: DecodeLoop, pending: int) -> BatchSeat:
        """Move ``loop``'s cache into the batch's (its own cache objects are emptied, not
        copied: the memory is held once)."""
        length = loop.cache[0].offset
        merged = [BatchKVCache.merge([layer]) for layer in loop.cache]
        if self.cache is None:
            self.cache = merged
        else:
            for batched, joining in zip(self.cache, merged, strict=True):
                batched.extend(joining)
        for layer in loop.cache:
            layer.keys = layer.values = None  # the offset stays: the loop's length
        seat = BatchSeat(loop, pending, length)
        self.seats.append(seat)
        return seat

    def _extract(self, leaving: list[BatchSeat]) -> None:
        """Give each of ``leaving`` its rows back in its own cache objects (and its draw of a
        step under way, unread), then drop them.

        As mlx-lm's ``BatchKVCache.extract`` and ``filter`` do, but with each row's padding
        known on the host (``BatchSeat.length``): theirs read it from the device, 32 waits
        for a 16-layer model, each behind the pass in flight (on an H100 a paused or ended
        sequence's turn took 6.5 and 13.8 ms). Here nothing is evaluated: the slices are
        computed with the next pass, or when the sequence's own cache is next read."""
        assert self.cache is not None
        for seat in leaving:
            if seat.drawing is not None:
                seat.loop.ready.append(seat.drawing)
                seat.drawing = None
            row = self.seats.index(seat)
            for own, batched in zip(seat.loop.cache, self.cache, strict=True):
                keys, values = batched.keys, batched.values
                assert keys is not None and values is not None  # a seat holds its prompt
                start, end = batched._idx - seat.length, batched._idx
                own.keys = mx.contiguous(keys[row : row + 1, :, start:end])
                own.values = mx.contiguous(values[row : row + 1, :, start:end])
                own.offset = seat.length
        kept = [i for i, seat in enumerate(self.seats) if seat not in leaving]
        self.seats = [self.seats[i] for i in kept]
        if not self.seats:
            self.cache = None
            return
        longest = max(seat.length for seat in self.seats)
        for batched in self.cache:
            _keep_rows(batched, kept, batched._idx - longest)

    def _step(self) -> Generator[PassPoint, None, None]:
        """Hand every seat its token of the pass in flight, the next pass queued first (so
        the device computes it while the host hands tokens on and builds the pass after).

        Without a pass in flight for every seat (the batch is new, or a sequence joined),
        the seats that have a draw take it, then one pass for all is computed now, in groups
        of layers where the pacing asks (a seat that leaves while the pass is paused takes
        its draw along: ``_extract``). Nothing is queued ahead where the scheduler says not
        to (a job about to pause: the device is then free at once for the next job) or
        where a pass is computed in stages (``PassTiming.decode_ahead``)."""
        seats = list(self.seats)
        if any(seat.drawing is None for seat in seats):
            for seat in seats:
                self._hand_over(seat)
            self._build(seats)
            stages = self.timing.pass_stages(len(seats)) if self.timing is not None else 1
            yield from pass_points(self.cache, stages)
            seats = [seat for seat in seats if seat in self.seats]  # some may have left
            self._queue(seats)
        if seats and self._may_queue_ahead(len(seats)):
            drawn = [seat.drawing for seat in seats]
            self._build(seats)
            self.passes_ahead += 1
            self._queue(seats)
            for seat, draw in zip(seats, drawn, strict=True):
                assert draw is not None
                seat.loop.ready.append(draw)
        else:
            for seat in seats:
                self._hand_over(seat)

    def _may_queue_ahead(self, seats: int) -> bool:
        timing = self.timing
        if not self.queue_ahead:
            return False
        return timing is None or (timing.decode_ahead() and timing.pass_stages(seats) == 1)

    def _build(self, seats: list[BatchSeat]) -> None:
        """The graph of one pass over every seat's pending token, each row drawn by its own
        loop (rows drawn alike, greedy with nothing else, in one go); not evaluated."""
        inputs = mx.stack([_token_array(seat.pending) for seat in seats])
        assert self.cache is not None
        with mx.stream(generation_stream):
            if self.compiled is not None and self.compiled.takes_batch(self.cache):
                logits = self.compiled.batched(inputs, self.cache)
            else:
                logits = self.model(inputs, cache=self.cache)[:, -1, :]
            together = _draw_greedy_rows(seats, logits)
            for row, seat in enumerate(seats):
                if row in together:
                    continue
                try:
                    seat.drawing = seat.loop.draw(inputs[row], logits[row : row + 1])
                except Exception as exc:  # its own processors failed (a grammar): it alone
                    seat.drawing = exc  # fails, at its next token; the rest go on
        for seat in seats:
            seat.length += 1
            if isinstance(seat.drawing, tuple):
                seat.pending = seat.drawing[0]
        self.steps += 1
        self.sequence_steps += len(seats)

    @staticmethod
    def _queue(seats: list[BatchSeat]) -> None:
        mx.async_eval([s.drawing[0] for s in seats if isinstance(s.drawing, tuple)])

    @staticmethod
    def _hand_over(seat: BatchSeat) -> None:
        if seat.drawing is not None:
            seat.loop.ready.append(seat.drawing)
            seat.drawing = None


def _draw_greedy_rows(seats: list[BatchSeat], logits: mx.array) -> set[int]:
    """Draw the rows whose loops draw the argmax and nothing else, in one go (where there
    are two or more); the rows drawn."""
    greedy = [row for row, seat in enumerate(seats) if seat.loop.plain_greedy]
    if len(greedy) < 2:
        return set()
    rows = logits[mx.array(greedy)] if len(greedy) < len(seats) else logits
    logprobs = rows - mx.logsumexp(rows, axis=-1, keepdims=True)
    tokens = mx.argmax(logprobs, axis=-1)
    for at, row in enumerate(greedy):
        seats[row].drawing = (tokens[at : at + 1], logprobs[at])
    return set(greedy)


def _keep_rows(batched: BatchKVCache, rows: list[int], unused: int) -> None:
    """Keep only ``rows`` of a layer's batched cache, and drop the ``unused`` positions that
    every kept row pads on its left (``BatchKVCache.filter`` without reading the device)."""
    if len(rows) < batched.offset.shape[0]:
        kept = mx.array(rows)
        if batched.keys is not None:
            batched.keys, batched.values = batched.keys[kept], batched.values[kept]
        batched.offset = batched.offset[kept]
        batched.left_padding = batched.left_padding[kept]
    if unused > 0:
        if batched.keys is not None:
            batched.keys = batched.keys[..., unused:, :]
            batched.values = batched.values[..., unused:, :]
        batched._idx -= unused
        batched.left_padding = batched.left_padding - unused


def _token_array(token: int | mx.array) -> mx.array:
    """A token to feed, as a 1-element array (an int, or a draw of a step still computing)."""
    if isinstance(token, int):
        return mx.array([token], dtype=mx.uint32)
    return token.reshape(1).astype(mx.uint32)


def batch_capacity(runner: Any, max_batch: int, cache_budget_bytes: int | None) -> BatchLimit:
    """How many sequences of ``runner``'s model may decode together: ``max_batch`` (the
    tier's setting), fewer where the memory left for KV caches cannot hold that many at the
    model's full context, and 1 where the model cannot decode a batch (checked here, on two
    prompts of different lengths, against each decoded alone)."""
    if max_batch < 2:
        return BatchLimit(1, "setting", 0)
    per_token = kv_bytes_per_token(runner)
    problem = batch_problem(runner.model, runner.new_cache)
    if problem is not None:
        return BatchLimit(1, f"unsupported: {problem}", per_token)
    if cache_budget_bytes is None:
        return BatchLimit(max_batch, "setting", per_token)
    per_sequence = per_token * runner.context_length
    fits = cache_budget_bytes // per_sequence if per_sequence else max_batch
    if fits >= max_batch:
        return BatchLimit(max_batch, "setting", per_token)
    return BatchLimit(max(1, int(fits)), "memory", per_token)


@dataclass(frozen=True)
class BatchLimit:
    """The batch's capacity and what set it (``/health``)."""

    sequences: int
    limited_by: str  # "setting", "memory" or "unsupported: <why>"
    kv_bytes_per_token: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "max_sequences": self.sequences,
            "limited_by": self.limited_by,
            "kv_bytes_per_token": self.kv_bytes_per_token,
        }


def kv_bytes_per_token(runner: Any) -> int:
    """Bytes one token takes in every layer's KV cache, measured on a fresh cache."""
    cache = runner.new_cache()
    if not all(type(c) is PlainKVCache for c in cache):
        return 0
    runner.model(mx.array([[0]]), cache=cache)
    mx.eval([c.state for c in cache])
    return int(sum(c.keys[..., :1, :].nbytes + c.values[..., :1, :].nbytes for c in cache))


def batch_problem(model: Any, new_cache: Any) -> str | None:
    """Why ``model`` cannot decode a batch (None: it can): its caches are not plain KV
    caches, or a batched step does not give each sequence the token it gets alone."""
    prompts = [[1, 2, 3, 4, 5], [6, 7, 8]]
    caches = [new_cache() for _ in prompts]
    if not all(type(c) is PlainKVCache for cache in caches for c in cache):
        return "its KV caches are not plain (sliding-window or recurrent layers)"
    try:
        alone = []
        for prompt, cache in zip(prompts, caches, strict=True):
            model(mx.array([prompt[:-1]]), cache=cache)
            alone.append(model(mx.array([prompt[-1:]]), cache=cache)[0, -1])
        for cache in caches:  # back to each prompt without its last token, then batched
            for layer in cache:
                layer.trim(1)
        batched = [BatchKVCache.merge([c[i] for c in caches]) for i in range(len(caches[0]))]
        last = mx.array([[p[-1]] for p in prompts])
        together = model(last, cache=batched)[:, -1]
        mx.eval(together, *alone)
    except Exception as exc:  # the model's attention cannot take a batched cache
        return f"{type(exc).__name__}: {exc}"
    # Batching changes the order of a few sums (bf16 rounds them differently): a broken
    # batch (padding attended to, positions shifted) differs by the logits' own scale.
    for row, logits in enumerate(alone):
        scale = float(mx.max(mx.abs(logits)).item())  # type: ignore[arg-type]
        error = float(mx.max(mx.abs(logits - together[row])).item())  # type: ignore[arg-type]
        if error > BATCH_TOLERANCE * max(scale, 1e-6):
            return f"a batched step differs from each sequence alone ({error:.3g} of {scale:.3g})"
    return None
