"""The processor that opens the reasoning section and ends it on budget."""

from __future__ import annotations

import mlx.core as mx

from gateway.engines.reasoning_section import ReasoningSection

START, END, VOCAB = 5, 6, 10


def run(section: ReasoningSection, choose: list[int]) -> list[int]:
    """Feed the processor as mlx-lm does: the prompt first, then each token drawn; the
    "model" draws ``choose[i]`` unless the processor leaves a single token allowed."""
    tokens = mx.array([1, 2])  # the prompt
    drawn = []
    for wanted in choose:
        logits = section(tokens, mx.zeros((1, VOCAB)))
        allowed = [i for i in range(VOCAB) if logits[0, i].item() > -float("inf")]
        token = allowed[0] if len(allowed) == 1 else wanted
        drawn.append(token)
        tokens = mx.concatenate([tokens, mx.array([token])])
    return drawn


def test_the_start_is_forced_then_the_end_once_the_budget_is_spent() -> None:
    section = ReasoningSection(START, END, budget=3, open_first=True)
    assert run(section, [7, 7, 7, 7, 7, 8, 8]) == [START, 7, 7, 7, END, 8, 8]
    assert section.done


def test_a_prompt_that_opened_the_section_counts_from_the_first_token() -> None:
    assert run(ReasoningSection(START, END, budget=2, spent=0), [7, 7, 7, 8]) == [7, 7, END, 8]
    assert run(ReasoningSection(START, END, budget=0, spent=0), [7, 8]) == [END, 8]


def test_a_model_that_ends_the_section_itself_is_left_alone() -> None:
    section = ReasoningSection(START, END, budget=5, open_first=True)
    assert run(section, [0, 7, END, 7, 7, 7, 7, 7]) == [START, 7, END, 7, 7, 7, 7, 7]


def test_without_a_budget_only_the_start_is_forced() -> None:
    section = ReasoningSection(START, END, budget=None, open_first=True)
    assert run(section, [7] * 8) == [START] + [7] * 7
