"""Room in a KV cache for a whole prompt, made at its first prefill chunk.

mlx-lm's ``KVCache`` grows by ``step`` (256) positions whenever a pass does not fit: a new
buffer, and the old one copied into a concatenation. A prompt prefilled in chunks therefore
allocated and copied at nearly every chunk. Each allocation of a size the allocator has not
cached is slow on some backends — on MLX's CUDA backend a chunk that grew the cache took
~70 ms where one that fit took ~7 ms (Llama-1B shape, H200), and a user who arrived then
waited for it. With the room made once for the prompt's remaining tokens, the first chunk
allocates and the others only write; the copies go too. Decoding grows the cache by
``step`` again, as mlx-lm does.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

STEP = 256  # mlx-lm's KVCache.step: room is made in multiples of it


@contextmanager
def room_for(cache: list[Any], tokens: int) -> Iterator[None]:
    """While inside, the next growth of each plain ``KVCache`` layer of ``cache`` makes room
    for at least ``tokens`` more positions at once; afterwards it grows by its usual step."""
    from mlx_lm.models.cache import KVCache

    layers = [layer for layer in cache if type(layer) is KVCache]
    room = -(-tokens // STEP) * STEP
    if room <= STEP:
        yield
        return
    for layer in layers:
        layer.step = room  # an instance attribute over the class's 256
    try:
        yield
    finally:
        for layer in layers:
            layer.__dict__.pop("step", None)
