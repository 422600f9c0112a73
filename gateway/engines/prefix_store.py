"""The prefix KV-cache store: reuse the longest cached token prefix of a prompt.

Built on mlx-lm's ``LRUPromptCache`` (a token trie with least-recently-inserted eviction
under a byte budget, which copies a cache before handing it out and trims copies of longer
entries to the common prefix, so a diverging request never corrupts a stored cache). This
class adds what the gateway needs around it: a ``PromptState`` in and out, at least one
prompt token left to feed, counters, and a trie whose edges are runs of tokens
(``prefix_trie.RunTrie``: mlx-lm's walks a long prompt token by token). Called only from the
inference thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gateway.engines.prefix_trie import RunTrie
from gateway.engines.runner import PromptState
from gateway.metrics import PrefixCacheMetrics

DEFAULT_MAX_ENTRIES = 64


class PrefixCacheStore:
    """Prompt states of finished generations and typing pre-prefills, by model and tokens."""

    def __init__(
        self,
        max_bytes: int,
        metrics: PrefixCacheMetrics | None = None,
        max_entries: int = DEFAULT_MAX_ENTRIES,
    ) -> None:
        from mlx_lm.models.cache import LRUPromptCache

        self.metrics = metrics
        self.enabled = max_bytes > 0
        self._lru = LRUPromptCache(max_size=max_entries, max_bytes=max_bytes)
        # Same answers, found by comparing runs of tokens in C (issue 32: ~4 ms of a 32K
        # prompt's path to its first token, and ~3 ms more at every insert).
        self._lru._trie = RunTrie()  # type: ignore[assignment]

    @property
    def nbytes(self) -> int:
        return int(self._lru.nbytes)

    def __len__(self) -> int:
        return len(self._lru)

    def fetch(self, model: str, prompt: Sequence[int]) -> PromptState | None:
        """A private copy of the cache for the longest stored prefix of ``prompt``, if any."""
        from mlx_lm.models.cache import can_trim_prompt_cache, trim_prompt_cache

        if not self.enabled or not prompt:
            return None
        tokens = list(prompt)
        cache, rest = self._lru.fetch_nearest_cache(model, tokens)
        if cache is not None and not rest:
            # The whole prompt is cached, but generating needs logits for its last token:
            # step back one token and feed it again.
            if not can_trim_prompt_cache(cache):
                cache = None
            else:
                trim_prompt_cache(cache, 1)
                rest = tokens[-1:]
        if cache is None:
            return None
        return PromptState(cache, tuple(tokens[: len(tokens) - len(rest)]))

    def insert(self, model: str, state: PromptState) -> None:
        """Keep ``state`` for later prompts that start with its tokens (it must not change)."""
        if not self.enabled or not state.tokens:
            return
        _trim_to_length(state.cache)
        self._lru.insert_cache(model, list(state.tokens), state.cache)
        if self.metrics is not None:
            self.metrics.prefix_cache_bytes.set(self.nbytes)

    def entries(self, model: str) -> list[PromptState]:
        """The stored states of ``model``, most recently inserted last (not copies: read only)."""
        lru = self._lru
        states = []
        for order in lru._lru._lrus.values():
            for key in [k for k in order if k[0] == model]:
                entry = lru._trie.get(*key)
                states.append(PromptState(entry.prompt_cache, tuple(key[1])))
        return states

    def drop_model(self, model: str) -> int:
        """Forget every entry of ``model`` (it was unloaded); returns the bytes freed."""
        # LRUPromptCache has no per-model removal; its trie and LRU order are walked here.
        lru = self._lru
        freed = 0
        for cache_type, order in lru._lru._lrus.items():
            for key in [k for k in order if k[0] == model]:
                order.remove(key)
                entry = lru._trie.pop(*key)
                lru._n_bytes -= entry.nbytes
                lru._n_bytes_by_type[cache_type] -= entry.nbytes
                freed += entry.nbytes
        if self.metrics is not None:
            self.metrics.prefix_cache_bytes.set(self.nbytes)
        return freed


# A layer's buffers are shrunk to the tokens they hold only where the empty tail is more
# than this share of them: a short conversation's mostly empty buffer is worth the copy, a
# long one's tail (under 256 tokens) is not (at 32K tokens the copy grew with the context
# and was on the next request's path; kept, the tail also lets a generation from the
# store's copy write its first tokens in place instead of growing the buffer, another copy).
TRIM_EMPTY_SHARE = 0.25


def _trim_to_length(cache: list[Any]) -> None:
    """Shrink each layer's buffers to the tokens it holds, in place, where the empty tail is
    a large share of them (``TRIM_EMPTY_SHARE``).

    mlx-lm grows a KV cache in 256-token steps, so a 40-token conversation kept as it is
    holds ~12 MB (SmolLM2, float32) of which ~80% is empty; the store keeps only what is
    filled (and so reports nearly true bytes). A later generation from a copy grows it again.
    """
    import mlx.core as mx
    from mlx_lm.models.cache import KVCache

    arrays = []
    for layer in cache:
        if type(layer) is not KVCache or layer.keys is None:
            continue  # rotating or quantized caches are bounded already
        if layer.keys.shape[2] - layer.offset <= TRIM_EMPTY_SHARE * layer.keys.shape[2]:
            continue
        keys, values = layer.keys_and_values()
        layer.keys, layer.values = mx.contiguous(keys), mx.contiguous(values)
        arrays += [layer.keys, layer.values]
    if arrays:
        mx.eval(arrays)
