"""LRU and LFU eviction: pure bookkeeping over expert ids."""

from __future__ import annotations

import pytest

from gateway.engines.experts.policy import LFUPolicy, LRUPolicy, make_policy


def test_lru_evicts_the_oldest_use() -> None:
    policy = LRUPolicy()
    policy.touch([1, 2])
    policy.touch([3])
    policy.touch([1])
    assert policy.victim([1, 2, 3], frozenset()) == 2


def test_lfu_evicts_the_least_used_and_breaks_ties_by_age() -> None:
    policy = LFUPolicy()
    for step in ([1, 2], [1, 3], [1, 2], [4]):
        policy.touch(step)
    # counts: 1 -> 3, 2 -> 2, 3 -> 1, 4 -> 1 (4 more recent than 3)
    assert policy.victim([1, 2, 3, 4], frozenset()) == 3
    assert policy.victim([1, 2, 4], frozenset()) == 4


def test_lfu_remembers_an_expert_after_it_left() -> None:
    policy = LFUPolicy()
    for _ in range(5):
        policy.touch([7])
    policy.touch([8])
    policy.touch([9])
    # 7 was evicted meanwhile and comes back: its five uses still count.
    assert policy.victim([7, 8, 9], frozenset()) == 8


@pytest.mark.parametrize("name", ["lru", "lfu"])
def test_never_evicts_what_the_step_uses(name: str) -> None:
    policy = make_policy(name)  # type: ignore[arg-type]
    policy.touch([1])
    policy.touch([2, 3])
    assert policy.victim([1, 2, 3], frozenset({1})) in (2, 3)
    with pytest.raises(ValueError, match="in use"):
        policy.victim([1, 2], frozenset({1, 2}))


def test_never_seen_experts_go_first() -> None:
    for policy in (LRUPolicy(), LFUPolicy()):
        policy.touch([1, 2])
        assert policy.victim([1, 2, 5], frozenset()) == 5
