"""The in-memory prefix store: longest-prefix reuse, private copies, a byte budget, per model.

Real mlx-lm KV caches of two small layers (no model): row ``i`` of every layer holds the
value ``i``, so what a fetch hands back can be checked row by row.
"""

from __future__ import annotations

from typing import Any

from gateway.engines.prefix_store import PrefixCacheStore
from gateway.engines.runner import PromptState
from gateway.metrics import GatewayMetrics

SYSTEM = tuple(range(1000, 1040))  # a 40-token system prompt
BYTES_PER_TOKEN = 2 * 2 * (2 * 4 * 4)  # layers x (keys, values) x (heads x dims x float32)


def make_state(tokens: tuple[int, ...], layers: int = 2) -> PromptState:
    import mlx.core as mx
    from mlx_lm.models.cache import KVCache

    cache = []
    for _ in range(layers):
        entry = KVCache()
        rows = mx.arange(len(tokens), dtype=mx.float32).reshape(1, 1, len(tokens), 1)
        keys = mx.broadcast_to(rows, (1, 2, len(tokens), 4))
        entry.update_and_fetch(keys, keys + 0.5)
        cache.append(entry)
    return PromptState(cache, tokens)  # type: ignore[arg-type]


def rows(state: PromptState) -> list[float]:
    layer: Any = state.cache[0]
    return [float(v) for v in layer.keys[0, 0, : layer.offset, 0].tolist()]


def offset(state: PromptState) -> int:
    return int(state.cache[0].offset)  # type: ignore[index]


def test_a_prompt_that_extends_an_entry_reuses_all_of_it() -> None:
    store = PrefixCacheStore(1 << 30)
    store.insert("smol", make_state(SYSTEM))
    state = store.fetch("smol", [*SYSTEM, 7, 8, 9])
    assert state is not None and state.tokens == SYSTEM
    assert offset(state) == len(SYSTEM) and rows(state) == [float(i) for i in range(40)]


def test_a_whole_cached_prompt_leaves_its_last_token_to_feed() -> None:
    store = PrefixCacheStore(1 << 30)
    store.insert("smol", make_state(SYSTEM))
    state = store.fetch("smol", SYSTEM)
    assert state is not None and state.tokens == SYSTEM[:-1] and offset(state) == 39


def test_a_diverging_prompt_gets_a_trimmed_copy_and_the_entry_stays_whole() -> None:
    store = PrefixCacheStore(1 << 30)
    store.insert("smol", make_state((*SYSTEM, 1, 2, 3, 4)))  # system + question A
    state = store.fetch("smol", [*SYSTEM, 9, 9])  # system + question B
    assert state is not None and state.tokens == SYSTEM and offset(state) == len(SYSTEM)
    # The copy grows as a generation would; the stored entry is not touched.
    import mlx.core as mx

    grown = mx.full((1, 2, 5, 4), -1.0)
    state.cache[0].update_and_fetch(grown, grown)  # type: ignore[index]
    again = store.fetch("smol", [*SYSTEM, 1, 2, 3, 4, 5])
    assert again is not None and len(again.tokens) == len(SYSTEM) + 4
    assert rows(again) == [float(i) for i in range(44)]


def test_nothing_in_common_or_another_model_is_a_miss() -> None:
    store = PrefixCacheStore(1 << 30)
    store.insert("smol", make_state(SYSTEM))
    assert store.fetch("smol", [5, 6, 7]) is None
    assert store.fetch("other", [*SYSTEM, 1]) is None
    assert store.fetch("smol", []) is None


def test_entries_hold_only_their_tokens_and_count_true_bytes() -> None:
    metrics = GatewayMetrics().prefix_cache
    store = PrefixCacheStore(1 << 30, metrics)
    store.insert("smol", make_state(SYSTEM))  # mlx-lm grew its buffers to 256 tokens
    assert store.nbytes == len(SYSTEM) * BYTES_PER_TOKEN
    assert metrics.prefix_cache_bytes._value.get() == store.nbytes


def test_the_byte_budget_evicts_the_least_recently_inserted() -> None:
    metrics = GatewayMetrics().prefix_cache
    store = PrefixCacheStore(int(1.5 * len(SYSTEM) * BYTES_PER_TOKEN), metrics)
    first, second = SYSTEM, tuple(t + 100 for t in SYSTEM)
    store.insert("smol", make_state(first))
    store.insert("smol", make_state(second))
    assert len(store) == 1 and store.nbytes <= store._lru.max_bytes
    assert store.fetch("smol", [*first, 1]) is None
    assert store.fetch("smol", [*second, 1]) is not None
    assert metrics.prefix_cache_bytes._value.get() == store.nbytes


def test_a_store_without_bytes_keeps_nothing() -> None:
    store = PrefixCacheStore(0)
    store.insert("smol", make_state(SYSTEM))
    assert len(store) == 0 and store.fetch("smol", [*SYSTEM, 1]) is None


def test_dropping_a_model_frees_its_entries_only() -> None:
    metrics = GatewayMetrics().prefix_cache
    store = PrefixCacheStore(1 << 30, metrics)
    store.insert("smol", make_state(SYSTEM))
    store.insert("smol", make_state(tuple(t + 100 for t in SYSTEM)))
    store.insert("big", make_state(SYSTEM))
    assert [s.tokens for s in store.entries("smol")] == [SYSTEM, tuple(t + 100 for t in SYSTEM)]
    freed = store.drop_model("smol")
    assert freed == 2 * len(SYSTEM) * BYTES_PER_TOKEN
    assert store.entries("smol") == [] and store.fetch("smol", [*SYSTEM, 1]) is None
    assert store.fetch("big", [*SYSTEM, 1]) is not None
    assert store.nbytes == len(SYSTEM) * BYTES_PER_TOKEN == metrics.prefix_cache_bytes._value.get()


def test_a_long_cache_is_kept_without_a_copy_a_short_mostly_empty_one_is_shrunk() -> None:
    """Shrinking a buffer copies it: worth it where most of it is empty (a short prompt in
    mlx-lm's 256-token steps), not for a long context's small tail (the copy grew with the
    context, on the next request's path)."""
    import mlx.core as mx
    from mlx_lm.models.cache import KVCache

    def grown(tokens: int) -> PromptState:
        entry = KVCache()
        for _ in range(tokens):  # one token at a time, as decoding grows it
            step = mx.ones((1, 2, 1, 4))
            entry.update_and_fetch(step, step)
        return PromptState([entry], tuple(range(tokens)))  # type: ignore[list-item]

    store = PrefixCacheStore(max_bytes=2**30)
    short, long = grown(40), grown(1000)
    long_keys = long.cache[0].keys  # type: ignore[index]
    assert short.cache[0].keys.shape[2] == 256 and long_keys.shape[2] == 1024  # type: ignore[index]
    store.insert("m", short)
    store.insert("m", long)
    assert short.cache[0].keys.shape[2] == 40  # type: ignore[index]
    assert long.cache[0].keys is long_keys  # kept as it is: 24 of 1,024 rows empty
    fetched = store.fetch("m", (*range(1000), 7))
    assert fetched is not None and len(fetched.tokens) == 1000
