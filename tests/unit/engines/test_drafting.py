"""Prompt lookup's guesses and the policy that decides whether drafting pays (no model)."""

from __future__ import annotations

from pathlib import Path

from gateway.engines.drafting import (
    HOPELESS_GUESS_SHARE,
    MAX_REST_STEPS,
    MISSES_BEFORE_REST,
    REST_STEPS,
    DraftPolicy,
)
from gateway.engines.prompt_lookup import PromptLookup
from gateway.engines.same_tokenizer import tokenizer_mismatch


def test_lookup_continues_the_latest_earlier_occurrence_of_the_longest_suffix() -> None:
    lookup = PromptLookup()
    text = [1, 2, 3, 4, 5, 9, 2, 3, 4, 7, 8, 2, 3, 4]
    # "2 3 4" occurred twice before: the latest one went on with 7 8.
    assert lookup.propose(text, 3) == [7, 8, 2]
    assert lookup.propose(text, 1) == [7]
    # The text grows (the output): indexed incrementally, the new suffix looked up.
    assert lookup.propose([*text, 5], 2) == [9, 2]  # "4 5" went on with 9


def test_lookup_finds_nothing_for_a_new_suffix_nor_for_itself() -> None:
    lookup = PromptLookup()
    assert lookup.propose([1, 2, 3, 4], 4) == []  # "3 4" only where it ends the text
    assert lookup.propose([1, 2, 3, 4, 5, 6], 0) == []


def test_a_reference_text_is_looked_up_too() -> None:
    lookup = PromptLookup(reference=[10, 11, 12, 13, 14])
    assert lookup.propose([5, 10, 11], 3) == [12, 13, 14]


def test_the_draft_grows_while_accepted_whole_and_shrinks_to_what_was() -> None:
    policy = DraftPolicy(max_length=16)
    assert policy.length == 4
    policy.verified(4, 4, seconds=0.1, step_seconds=0.1)
    assert policy.length == 8
    policy.verified(8, 8, seconds=0.1, step_seconds=0.1)
    policy.verified(16, 16, seconds=0.1, step_seconds=0.1)
    assert policy.length == 16
    policy.verified(16, 5, seconds=0.1, step_seconds=0.1)
    assert policy.length == 6 and policy.drafting
    assert (policy.counts.drafted, policy.counts.accepted) == (44, 33)


def test_drafting_rests_when_it_does_not_pay_and_longer_each_time() -> None:
    policy = DraftPolicy(max_length=16)
    # Nothing accepted, the pass twice a step's time: a loss.
    policy.verified(4, 0, seconds=0.2, step_seconds=0.1)
    assert not policy.drafting
    for _ in range(REST_STEPS - 1):
        policy.stepped(looked_up=False)
        assert not policy.drafting
    policy.stepped(looked_up=False)
    assert policy.drafting
    policy.verified(2, 0, seconds=0.2, step_seconds=0.1)  # still a loss: twice as long
    rested = 0
    while not policy.drafting:
        policy.stepped(looked_up=False)
        rested += 1
    assert rested == 2 * REST_STEPS


def test_a_cheap_pass_pays_even_when_little_is_accepted() -> None:
    """A GPU verifies a draft in about a step's time: one token accepted in two is a gain."""
    policy = DraftPolicy(max_length=16)
    for _ in range(20):
        policy.verified(4, 1, seconds=0.011, step_seconds=0.01)
    assert policy.drafting


def test_lookups_that_find_nothing_rest_drafting_so_steps_queue_ahead() -> None:
    policy = DraftPolicy(max_length=16)
    for _ in range(MISSES_BEFORE_REST):
        assert policy.drafting
        policy.stepped(looked_up=True)
    assert not policy.drafting


def rest_after_misses(policy: DraftPolicy) -> int:
    """Lookups that find nothing until drafting rests; how many steps it rests."""
    while policy.drafting:
        policy.stepped(looked_up=True)
    rested = 0
    while not policy.drafting:
        policy.stepped(looked_up=False)
        rested += 1
    return rested


def test_lookups_that_keep_finding_nothing_rest_longer_each_time_until_a_draft() -> None:
    policy = DraftPolicy(max_length=16)
    rests = [rest_after_misses(policy) for _ in range(7)]
    assert rests == [8, 16, 32, 64, 128, 256, 256]
    assert MISSES_BEFORE_REST == 8 and MAX_REST_STEPS == 256
    policy.verified(4, 3, seconds=0.1, step_seconds=0.1)  # a draft found: over again
    assert rest_after_misses(policy) == MISSES_BEFORE_REST


def tokenizer_folder(root: Path, name: str, vocab: dict[str, int], added: list[str]) -> Path:
    import json

    folder = root / name
    folder.mkdir()
    data = {
        "model": {"type": "BPE", "vocab": vocab},
        "added_tokens": [{"content": t, "id": len(vocab) + i} for i, t in enumerate(added)],
    }
    (folder / "tokenizer.json").write_text(json.dumps(data))
    return folder


def test_a_draft_must_share_the_tokenizer(tmp_path: Path) -> None:
    a = tokenizer_folder(tmp_path, "a", {"x": 0, "y": 1}, ["<s>"])
    b = tokenizer_folder(tmp_path, "b", {"x": 0, "y": 1}, ["<s>"])
    c = tokenizer_folder(tmp_path, "c", {"x": 0, "z": 1}, ["<s>"])
    d = tokenizer_folder(tmp_path, "d", {"x": 0, "y": 1}, ["<bos>"])
    assert tokenizer_mismatch(a, b) is None
    assert "vocabularies differ" in (tokenizer_mismatch(a, c) or "")
    assert "special tokens differ" in (tokenizer_mismatch(a, d) or "")
    assert "no tokenizer.json" in (tokenizer_mismatch(a, tmp_path) or "")


def test_a_drafter_whose_guess_costs_about_a_step_rests_the_longest_at_once() -> None:
    """Guesses that cost ~a model step cannot pay even when all are right (a draft model on
    a GPU): one draft, then the longest rest; a cheap drafter goes on with the same result."""
    hopeless, cheap = DraftPolicy(max_length=16), DraftPolicy(max_length=16)
    hopeless.verified(4, 4, seconds=0.5, step_seconds=0.1, seconds_per_guess=0.095)
    cheap.verified(4, 4, seconds=0.2, step_seconds=0.1, seconds_per_guess=0.02)
    assert 0.095 >= HOPELESS_GUESS_SHARE * 0.1 > 0.02
    assert cheap.drafting and cheap.length == 8
    assert not hopeless.drafting
    for _ in range(MAX_REST_STEPS - 1):
        hopeless.stepped(looked_up=False)
    assert not hopeless.drafting
    hopeless.stepped(looked_up=False)
    assert hopeless.drafting  # tried again: the pace may have changed (a longer context)
