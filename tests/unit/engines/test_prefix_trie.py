"""The run trie answers as mlx-lm's token-by-token ``PromptTrie`` does (issue 32).

Random operations on both, over a small alphabet (so prompts share starts, split runs and
diverge inside them), and every answer compared; where several longer entries are equally
short, either is right, so only its length and its being stored are compared.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from mlx_lm.models.cache import PromptTrie

from gateway.engines.prefix_store import PrefixCacheStore
from gateway.engines.prefix_trie import RunTrie


def random_tokens(rng: random.Random) -> list[int]:
    return [rng.randrange(3) for _ in range(rng.randrange(0, 9))]


def same_search(ours: RunTrie, theirs: PromptTrie, model: str, tokens: list[int]) -> None:
    got, want = ours.search(model, tokens), theirs.search(model, tokens)
    assert (got.exact, got.shorter, got.common_prefix) == (
        want.exact,
        want.shorter,
        want.common_prefix,
    ), tokens
    assert (got.longer is None) == (want.longer is None), tokens
    if want.longer is not None:
        assert len(got.longer) == len(want.longer), tokens
        assert got.longer[: want.common_prefix] == tokens[: want.common_prefix]
        assert ours.get(model, got.longer) is not None


@pytest.mark.parametrize("seed", range(40))
def test_every_answer_is_the_prompt_tries(seed: int) -> None:
    rng = random.Random(seed)
    ours, theirs = RunTrie(), PromptTrie()
    kept: dict[tuple[str, tuple[int, ...]], Any] = {}
    for step in range(120):
        model = rng.choice(["a", "b"])
        tokens = random_tokens(rng)
        action = rng.random()
        if action < 0.4:
            value = f"v{step}"
            assert ours.add(model, tokens, value) == theirs.add(model, tokens, value)
            kept[(model, tuple(tokens))] = value
        elif action < 0.6 and kept:
            model, key = rng.choice(sorted(kept))
            assert (
                ours.pop(model, list(key)) == theirs.pop(model, list(key)) == kept.pop((model, key))
            )
        elif action < 0.7 and (model, tuple(tokens)) in kept:
            popped = ours.pop_prefixes(model, tokens)
            assert popped == theirs.pop_prefixes(model, tokens)
            for length, _ in popped:
                kept.pop((model, tuple(tokens[:length])))
        else:
            same_search(ours, theirs, model, tokens)
        for (kept_model, key), value in kept.items():
            assert ours.get(kept_model, list(key)) == value


def test_a_missing_entry_is_a_key_error() -> None:
    trie = RunTrie()
    trie.add("m", [1, 2, 3], "x")
    for missing in ([1, 2], [1, 2, 4], [1, 2, 3, 4], [9]):
        with pytest.raises(KeyError):
            trie.get("m", missing)


def test_a_long_prompt_is_kept_as_a_few_runs_not_a_node_per_token() -> None:
    # What makes a 32K-token lookup cheap: the walk takes one step per branch point.
    trie = RunTrie()
    conversation = list(range(32_768))
    trie.add("m", conversation, "first turn")
    trie.add("m", [*conversation, 7, 8], "second turn")
    trie.add("m", [*conversation[:100], 5], "other question")
    root = trie._roots["m"]
    assert len(root.edges) == 1
    ((label, node),) = root.edges.values()
    assert len(label) == 100 and len(node.edges) == 2
    found = trie.search("m", [*conversation, 7, 9])
    assert found.shorter == conversation and found.common_prefix == len(conversation) + 1


def test_the_prefix_store_looks_up_in_a_run_trie() -> None:
    assert isinstance(PrefixCacheStore(1 << 20)._lru._trie, RunTrie)
