"""How many leading tokens two token sequences share, compared in C.

Used wherever a conversation is matched against what is held for it (the prefix store's
trie, the disk cache, a hint's shared start with its request, a draft model's cache): a loop
in Python over a 32K-token conversation costs milliseconds on every request's path, slices
of tuples compare at C speed. MLX-free (mlx-lm's ``common_prefix_len`` loops, and importing
it imports MLX, which must not happen before the compute path loads OpenBLAS).
"""

from __future__ import annotations

from collections.abc import Sequence


def common_prefix(a: Sequence[int], b: Sequence[int], limit: int) -> int:
    """How many leading tokens ``a`` and ``b`` share, at most ``limit`` (slices compare in C)."""
    low, high = 0, min(len(a), len(b), limit)
    if tuple(a[:high]) == tuple(b[:high]):
        return high
    while low < high:  # the invariant: a[:low] == b[:low], a[:high + 1] != b[:high + 1]
        middle = (low + high + 1) // 2
        if tuple(a[:middle]) == tuple(b[:middle]):
            low = middle
        else:
            high = middle - 1
    return low
