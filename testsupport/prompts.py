"""Prompts no prompt cache has seen: a benchmark times a cold prefill with them, a test makes
sure a request cannot be answered from an earlier one's cache."""

from __future__ import annotations

import random

# Common words, each a token or two: with a number appended, each drawn word is new text.
POOL = [
    "river",
    "stone",
    "apple",
    "cloud",
    "tiger",
    "lamp",
    "paper",
    "window",
    "garden",
    "violin",
    "copper",
]


def uncached_prompt(words: int, seed: int) -> str:
    """Words no cache has seen (each a word of the pool and a number), the same per seed."""
    rng = random.Random(seed)
    return " ".join(rng.choice(POOL) + str(rng.randrange(1000)) for _ in range(words))
