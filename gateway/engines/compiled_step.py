"""The decode step compiled with ``mx.compile``: traced once per model and KV buffer size,
then replayed at every step.

Why: eager, every decode step builds the model's graph again in Python (a few hundred
operations: 0.8 ms on the H200 for a 16-layer model, 3 ms on this CPU for SmolLM2's 30
layers) and runs each elementwise operation as a kernel of its own. Compiled, the graph is
traced once and replayed (the Python work of a step drops to the call), and MLX fuses the
elementwise chains (an MLP's activation and product, the residual adds) into single kernels.

How: a compiled graph is replayed only for inputs of the same shapes, so a step's shapes must
not change from one token to the next. The layers' caches stay mlx-lm ``KVCache``s (the prefix
store, drafting and the batch read them as before); during a step each layer sees a
``BufferView`` instead: the whole preallocated buffer, written at a position given as an
array (``mx.slice_update``), with a mask hiding the buffer's tail not written yet. The buffer
grows in buckets (``capacity_for``): a few sizes, so a few traces, per doubling of the
context, and an unwritten tail of at most an eighth of it that attention reads and masks.

Not every model takes it. One whose layers read their cache's offset as a number (a branch,
a range) fails to trace with an array there; one whose caches are not plain ``KVCache``s (a
sliding window, quantized, a recurrent state) or whose experts stream from disk (they read
the routing on the host) is not tried. ``CompiledStep.probe`` runs the compiled step beside
the eager one on the same cache at load; a model that fails it keeps the eager step, and
``/health`` says why (``MLXRunner.decode_step``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import BatchKVCache, make_prompt_cache
from mlx_lm.models.cache import KVCache as PlainKVCache

from gateway.engines.runner import KVCache

# The smallest growth of a buffer: mlx-lm's own (``KVCache.step``).
MIN_GROWTH_TOKENS = 256
PROBE_TOKENS = 6
# At most this many traces are kept (each a graph of the whole model: ~3 MB of host memory
# for SmolLM2's 30 layers, measured): past it, all are dropped and traced again as needed.
# A trace is one shape of inputs: a step's, a draft's length, a batch's size, each per
# buffer size.
MAX_TRACES = 48


def capacity_for(tokens: int) -> int:
    """The buffer size that holds ``tokens``: a multiple of 256 below 2,048 tokens, then of
    an eighth of the power of two below it (2,048-4,095: 256; 4,096-8,191: 512; ...): eight
    sizes per doubling, and past 2,048 tokens an unwritten tail of at most an eighth."""
    growth = max(MIN_GROWTH_TOKENS, 1 << max(tokens.bit_length() - 4, 0))
    return -(-tokens // growth) * growth


class BufferView:
    """A layer's KV cache as a compiled step sees it: the whole buffer, the position to write
    at as an array, and a mask over the positions written so far. In a batch (left-padded
    rows, as mlx-lm's ``BatchKVCache``) each row's padding is masked too, and its RoPE
    offset is its own."""

    def __init__(
        self,
        keys: mx.array,
        values: mx.array,
        position: mx.array,
        left_padding: mx.array | None = None,
    ) -> None:
        self.keys = keys
        self.values = values
        self.position = position  # where this pass writes, for every row
        self.left_padding = left_padding
        # What the layers' RoPE reads (it takes an array, one offset per row in a batch).
        self.offset = position if left_padding is None else position - left_padding

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        start = self.position[None]
        self.keys = mx.slice_update(self.keys, keys, start, axes=(2,))
        self.values = mx.slice_update(self.values, values, start, axes=(2,))
        return self.keys, self.values

    def make_mask(
        self, queries: int, return_array: bool = False, window_size: int | None = None
    ) -> mx.array:
        """Query ``i`` (at ``position + i``) sees the positions up to its own, past its
        row's padding."""
        if window_size is not None:
            raise NotImplementedError("a sliding window is not compiled")
        positions = mx.arange(self.keys.shape[2])
        seen = positions[None] <= (self.position + mx.arange(queries))[:, None]
        if self.left_padding is None:
            return seen
        return (seen[None] & (positions >= self.left_padding[:, None, None]))[:, None]


class CompiledStep:
    """One model's decode passes, compiled: ``step(tokens, cache)`` gives the logits after
    each of ``tokens`` (a step's one, or a draft's pending token and guesses) and leaves them
    in ``cache``, as ``model(tokens, cache)`` does; ``step.batched(tokens, cache)`` the same
    for a batch's ``BatchKVCache``, one token per row."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.renewals = 0  # how often the traces were dropped (``MAX_TRACES``)
        self._renew()

    def _renew(self) -> None:
        """New compiled functions: the old ones' traces are freed with them."""
        self._compiled: Callable[..., Sequence[mx.array]] = mx.compile(self._traced)
        self._compiled_batch: Callable[..., Sequence[mx.array]] = mx.compile(self._traced_batch)
        self.traces: set[tuple[int, ...]] = set()

    def _shape(self, rows: int, tokens: int, size: int) -> None:
        """Note the shape of the next pass (its traces are bounded: ``MAX_TRACES``)."""
        shape = (rows, tokens, size)
        if shape not in self.traces:
            if len(self.traces) >= MAX_TRACES:
                self._renew()
                self.renewals += 1
            self.traces.add(shape)

    def _traced(self, tokens: mx.array, position: mx.array, *buffers: mx.array) -> list[mx.array]:
        layers = len(buffers) // 2
        views = [BufferView(buffers[i], buffers[layers + i], position) for i in range(layers)]
        return self._pass(tokens[None], views)

    def _traced_batch(
        self, tokens: mx.array, position: mx.array, left_padding: mx.array, *buffers: mx.array
    ) -> list[mx.array]:
        layers = len(buffers) // 2
        views = [
            BufferView(buffers[i], buffers[layers + i], position, left_padding)
            for i in range(layers)
        ]
        return self._pass(tokens, views)

    def _pass(self, tokens: mx.array, views: list[BufferView]) -> list[mx.array]:
        logits = self.model(tokens, cache=views)
        # A batch's: each row's last position; one sequence's: every position (a verified
        # draft's tokens), so one step's is one row.
        logits = logits[:, -1, :] if logits.shape[0] > 1 else logits[0]
        return [logits, *(v.keys for v in views), *(v.values for v in views)]

    @staticmethod
    def takes(cache: KVCache) -> bool:
        """Whether ``cache`` is one a compiled step writes: plain ``KVCache``s, filled."""
        return all(type(c) is PlainKVCache and c.keys is not None for c in cache)

    def __call__(self, tokens: mx.array, cache: KVCache) -> mx.array:
        """The logits after each of ``tokens`` (``(n,)``: a step's one, or a draft's pending
        token and guesses, verified in one pass), ``(n, vocabulary)``; the tokens are left
        in ``cache``. Each ``n`` is a trace of its own (a draft's length varies little)."""
        offset = cache[0].offset
        make_room(cache, offset + tokens.shape[0])
        self._shape(1, tokens.shape[0], cache[0].keys.shape[2])
        outputs = self._compiled(tokens, mx.array(offset, dtype=mx.int32), *_buffers(cache))
        _written(cache, outputs)
        for layer in cache:
            layer.offset += tokens.shape[0]
        return outputs[0]

    @staticmethod
    def takes_batch(cache: Sequence[BatchKVCache]) -> bool:
        """Whether a batch's ``cache`` is one a compiled step writes: filled, no right
        padding left to roll away."""
        return all(
            type(c) is BatchKVCache and c.keys is not None and c._right_padding is None
            for c in cache
        )

    def batched(self, tokens: mx.array, cache: Sequence[BatchKVCache]) -> mx.array:
        """The logits of each row's next token after ``tokens`` (one per row, ``(B, 1)``),
        the tokens left in ``cache``, as ``model(tokens, cache)`` does with a batch's cache."""
        index = cache[0]._idx
        make_room(cache, index + 1)
        keys = cache[0].keys
        assert keys is not None  # a batch's cache holds its sequences (``takes_batch``)
        self._shape(tokens.shape[0], 1, keys.shape[2])
        position = mx.array(index, dtype=mx.int32)
        outputs = self._compiled_batch(tokens, position, cache[0].left_padding, *_buffers(cache))
        _written(cache, outputs)
        for layer in cache:
            layer._idx += 1
            layer.offset = layer.offset + 1
        return outputs[0]

    @classmethod
    def probe(cls, model: Any, first: int) -> tuple[CompiledStep | None, str]:
        """A compiled step for ``model`` where it gives the eager step's logits (the same
        greedy token, within ``tolerance`` of their range) for two steps on a short cache,
        else None; and why. Run it on the stream the steps will run on."""
        eager = make_prompt_cache(model)
        if not all(type(c) is PlainKVCache for c in eager):
            kinds = sorted({type(c).__name__ for c in eager})
            return None, f"eager: its caches are {', '.join(kinds)}, not plain KVCache"
        mx.eval(model(mx.array([[first] * PROBE_TOKENS]), cache=eager))
        compiled = _same_arrays(eager)  # (written, they are copied: MLX arrays do not change)
        step = cls(model)
        token = mx.array([first])
        try:
            for _ in range(2):
                want = model(token[None], cache=eager)[:, -1, :]
                differs = logits_differ(want, step(token, compiled))
                if differs:
                    return (
                        None,
                        f"eager: the compiled step's logits differ from the eager step's ({differs})",
                    )
                token = mx.argmax(want, axis=-1)
        except Exception as exc:  # a layer that cannot be traced: the eager step it is
            return None, f"eager: its layers cannot be compiled ({type(exc).__name__}: {exc})"
        return step, "compiled"


def _same_arrays(cache: KVCache) -> KVCache:
    """Another cache object per layer holding the same arrays."""
    copies = []
    for layer in cache:
        copy = PlainKVCache()
        copy.keys, copy.values, copy.offset = layer.keys, layer.values, layer.offset
        copies.append(copy)
    return copies


def batch_problem(step: CompiledStep, model: Any) -> str | None:
    """Why ``step`` does not compile ``model``'s batched steps (None: it does): two sequences
    of different lengths decoded a step as a batch, compiled and eager, on the same caches,
    every row compared (``logits_differ``). (One step: a replay at later positions is what
    ``CompiledStep.probe`` checked already, through the same views.)"""
    prompts = [[1, 2, 3, 4, 5], [6, 7, 8]]
    caches = [make_prompt_cache(model) for _ in prompts]
    for prompt, cache in zip(prompts, caches, strict=True):
        mx.eval(model(mx.array([prompt]), cache=cache))
    # One batch for each way, merged from the same prefilled caches (a merge copies).
    eager, compiled = (
        [BatchKVCache.merge([c[i] for c in caches]) for i in range(len(caches[0]))]
        for _ in range(2)
    )
    tokens = mx.array([[9], [10]])
    try:
        want = model(tokens, cache=eager)[:, -1, :]
        got = step.batched(tokens, compiled)
        for row in range(len(prompts)):
            differs = logits_differ(want[row], got[row])
            if differs:
                return f"the compiled batched step's logits differ from the eager one's ({differs})"
    except Exception as exc:  # a layer that cannot be traced with a batch's offsets
        return f"its layers cannot be compiled for a batch ({type(exc).__name__}: {exc})"
    return None


def logits_differ(want: mx.array, got: mx.array) -> str | None:
    """How ``got`` differs from ``want`` beyond ``tolerance`` (another greedy token, or a
    logit off by more than that share of their range), or None."""
    allowed = tolerance(want.dtype)
    want, got = want.astype(mx.float32), got.astype(mx.float32)
    read = mx.stack(
        [mx.max(mx.abs(want - got)), mx.min(want), mx.max(want), mx.argmax(want), mx.argmax(got)]
    )
    values: list[float] = read.tolist()  # type: ignore[assignment]
    worst, low, high, picked, pick = values
    scale = high - low or 1.0
    if picked != pick:
        return f"greedy token {int(pick)}, not {int(picked)}"
    if worst > allowed * scale:
        return f"by {worst:.3g}, {worst / scale:.2%} of their range"
    return None


def tolerance(dtype: mx.Dtype) -> float:
    """How far a compiled step's logits may be from the eager step's, as a share of their
    range: fused kernels round float16 and bfloat16 intermediates differently (float32
    hardly at all). A layer that misreads its position or its mask is off by far more."""
    return 1e-3 if dtype == mx.float32 else 5e-2


def make_room(cache: Sequence[Any], tokens: int) -> None:
    """Give each layer's buffers a size of ``capacity_for``'s that holds ``tokens``, keeping
    what they hold; the tail past it is zeros, never read unmasked. A buffer of another
    size (mlx-lm grows its own by 256 from wherever it stands; a batch's shrinks when a
    sequence leaves) is resized too: each size is a trace, kept for every later step of
    that size, so the sizes are kept few."""
    for layer in cache:
        size = layer.keys.shape[2]
        if size < tokens or capacity_for(size) != size:
            held = layer._idx if isinstance(layer, BatchKVCache) else layer.offset
            layer.keys = _resized(layer.keys, held, capacity_for(tokens))
            layer.values = _resized(layer.values, held, capacity_for(tokens))


def reserve(cache: Sequence[Any], tokens: int, *, buckets: bool) -> None:
    """Buffers that hold ``tokens`` before a prefill writes them. mlx-lm grows a layer's
    buffer by the chunk being written, copying all it holds each time: a long prompt's
    chunks copy O(n²) in all, and on a long conversation a new turn's few tokens copy the
    whole cache. One resize here copies what is held once. ``buckets``: a size of
    ``capacity_for`` (a compiled step's, which it would resize to anyway), else mlx-lm's
    own steps of 256. Other kinds of cache, and empty ones (nothing to copy), are left as
    they are."""
    if not CompiledStep.takes(cache):
        return
    size = capacity_for(tokens) if buckets else -(-tokens // MIN_GROWTH_TOKENS) * MIN_GROWTH_TOKENS
    for layer in cache:
        if layer.keys.shape[2] < tokens:
            layer.keys = _resized(layer.keys, layer.offset, size)
            layer.values = _resized(layer.values, layer.offset, size)


def _resized(buffer: mx.array, held: int, size: int) -> mx.array:
    tail = mx.zeros((*buffer.shape[:2], size - held, buffer.shape[3]), buffer.dtype)
    return mx.concatenate([buffer[..., :held, :], tail], axis=2)


def _buffers(cache: Sequence[Any]) -> list[mx.array]:
    return [*(c.keys for c in cache), *(c.values for c in cache)]


def _written(cache: Sequence[Any], outputs: Sequence[mx.array]) -> None:
    """Each layer's buffers as the compiled pass wrote them (its outputs after the logits)."""
    layers = len(cache)
    for index, layer in enumerate(cache):
        layer.keys = outputs[1 + index]
        layer.values = outputs[1 + layers + index]
