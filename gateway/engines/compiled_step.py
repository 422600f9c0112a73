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
from mlx_lm.models.cache import KVCache as PlainKVCache
from mlx_lm.models.cache import make_prompt_cache

from gateway.engines.runner import KVCache

# The smallest growth of a buffer: mlx-lm's own (``KVCache.step``).
MIN_GROWTH_TOKENS = 256
PROBE_TOKENS = 6


def capacity_for(tokens: int) -> int:
    """The buffer size that holds ``tokens``: a multiple of 256 below 2,048 tokens, then of
    an eighth of the power of two below it (2,048-4,095: 256; 4,096-8,191: 512; ...): eight
    sizes per doubling, and past 2,048 tokens an unwritten tail of at most an eighth."""
    growth = max(MIN_GROWTH_TOKENS, 1 << max(tokens.bit_length() - 4, 0))
    return -(-tokens // growth) * growth


class BufferView:
    """A layer's KV cache as a compiled step sees it: the whole buffer, the position to write
    at as an array, and a mask over the positions written so far."""

    def __init__(self, keys: mx.array, values: mx.array, offset: mx.array) -> None:
        self.keys = keys
        self.values = values
        self.offset = offset  # read by the layers' RoPE, which takes an array

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        start = self.offset[None]
        self.keys = mx.slice_update(self.keys, keys, start, axes=(2,))
        self.values = mx.slice_update(self.values, values, start, axes=(2,))
        return self.keys, self.values

    def make_mask(
        self, queries: int, return_array: bool = False, window_size: int | None = None
    ) -> mx.array:
        """Query ``i`` (at ``offset + i``) sees the positions up to its own."""
        if window_size is not None:
            raise NotImplementedError("a sliding window is not compiled")
        seen = self.offset + mx.arange(queries)[:, None]
        return mx.arange(self.keys.shape[2])[None] <= seen


class CompiledStep:
    """One model's decode step, compiled: ``step(token, cache)`` gives the logits of the
    token after ``token`` and leaves the token in ``cache``, as ``model(token, cache)`` does."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self._compiled: Callable[..., Sequence[mx.array]] = mx.compile(self._traced)

    def _traced(self, token: mx.array, offset: mx.array, *buffers: mx.array) -> list[mx.array]:
        layers = len(buffers) // 2
        views = [BufferView(buffers[i], buffers[layers + i], offset) for i in range(layers)]
        logits = self.model(token[None], cache=views)[:, -1, :]
        return [logits, *(v.keys for v in views), *(v.values for v in views)]

    @staticmethod
    def takes(cache: KVCache) -> bool:
        """Whether ``cache`` is one a compiled step writes: plain ``KVCache``s, filled."""
        return all(type(c) is PlainKVCache and c.keys is not None for c in cache)

    def __call__(self, token: mx.array, cache: KVCache) -> mx.array:
        offset = cache[0].offset
        make_room(cache, offset + 1)
        outputs = self._compiled(
            token,
            mx.array(offset, dtype=mx.int32),
            *(c.keys for c in cache),
            *(c.values for c in cache),
        )
        layers = len(cache)
        for index, layer in enumerate(cache):
            layer.keys = outputs[1 + index]
            layer.values = outputs[1 + layers + index]
            layer.offset += 1
        return outputs[0]

    @classmethod
    def probe(cls, model: Any, first: int) -> tuple[CompiledStep | None, str]:
        """A compiled step for ``model`` where it gives the eager step's logits (the same
        greedy token, within ``tolerance`` of their range) for two steps on a short cache,
        else None; and why. Run it on the stream the steps will run on."""
        eager, compiled = make_prompt_cache(model), make_prompt_cache(model)
        if not all(type(c) is PlainKVCache for c in eager):
            kinds = sorted({type(c).__name__ for c in eager})
            return None, f"eager: its caches are {', '.join(kinds)}, not plain KVCache"
        prompt = mx.array([[first] * PROBE_TOKENS])
        mx.eval(model(prompt, cache=eager), model(prompt, cache=compiled))
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


def make_room(cache: KVCache, tokens: int) -> None:
    """Grow each layer's buffers to hold ``tokens`` (to ``capacity_for(tokens)``), keeping
    what they hold; the tail past it is zeros, never read unmasked."""
    for layer in cache:
        if layer.keys.shape[2] < tokens:
            size = capacity_for(tokens)
            layer.keys = _grown(layer.keys, layer.offset, size)
            layer.values = _grown(layer.values, layer.offset, size)


def _grown(buffer: mx.array, held: int, size: int) -> mx.array:
    tail = mx.zeros((*buffer.shape[:2], size - held, buffer.shape[3]), buffer.dtype)
    return mx.concatenate([buffer[..., :held, :], tail], axis=2)
