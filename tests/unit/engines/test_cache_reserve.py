"""A prompt's KV buffers are sized once before its prefill writes them (``reserve``), not
grown by mlx-lm a chunk at a time (each growth copies all the buffer holds: O(n²) over a
long prompt, the whole conversation on a new turn), and the tokens stay generate_step's."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import mlx.core as mx
import pytest
from mlx_lm.generate import generate_step
from mlx_lm.models.cache import KVCache

from gateway.config import default_cache_dir
from gateway.engines.compiled_step import capacity_for
from gateway.engines.device import choose_compute_path
from gateway.engines.mlx_runner import MLXRunner
from gateway.engines.runner import PromptState
from gateway.modelstore.store import DEFAULT_MODEL_ID, ModelStore
from gateway.seam.backend import SamplingParams, TokenEvent

CHUNK = 64  # a 300-token prompt in five chunks
TOKENS = 12
GREEDY = SamplingParams(max_tokens=TOKENS, temperature=0.0)


@pytest.fixture(scope="module", params=["compiled", "eager"])
def runner(request: pytest.FixtureRequest) -> MLXRunner:
    folder = ModelStore(default_cache_dir()).path_for(DEFAULT_MODEL_ID)
    made = MLXRunner("m", folder, choose_compute_path(), decode_step=request.param)
    made.speculation = "off"
    made.timing.prefill_chunk_tokens = CHUNK
    return made


@pytest.fixture
def growths(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The sizes a layer's buffer had each time mlx-lm grew it (a copy of what it held);
    a layer's first buffer (nothing to copy) is not counted."""
    seen: list[int] = []
    update = KVCache.update_and_fetch

    def counted(self: KVCache, keys: mx.array, values: mx.array) -> Any:
        before = None if self.keys is None else self.keys.shape[2]
        fetched = update(self, keys, values)
        if before is not None and self.keys.shape[2] != before:
            seen.append(before)
        return fetched

    monkeypatch.setattr(KVCache, "update_and_fetch", counted)
    yield seen


def prompt_of(runner: MLXRunner, lines: int) -> list[int]:
    text = " ".join(f"line {n}: the keeper climbs the stairs." for n in range(lines))
    return runner.render_chat([{"role": "user", "content": text}])


def reference(runner: MLXRunner, prompt: list[int]) -> list[int]:
    steps = generate_step(
        mx.array(prompt), runner.model, max_tokens=TOKENS, prompt_cache=runner.new_cache()
    )
    return [int(token) for token, _ in steps]


def generated(runner: MLXRunner, prompt: list[int], state: PromptState | None = None) -> Any:
    generation = runner.generate(prompt, GREEDY, state)
    tokens = [t for e in generation if isinstance(e, TokenEvent) for t in e.token_ids]
    assert generation.state is not None
    return tokens, generation.state


def expected_size(runner: MLXRunner, tokens: int) -> int:
    if runner.compiled_step is not None:
        return capacity_for(tokens)
    return -(-tokens // 256) * 256


def fits(runner: MLXRunner, prompt: int) -> bool:
    """Whether the decode after a ``prompt``-token prompt fits the buffer sized for it (so
    that no growth is the decode's own)."""
    return expected_size(runner, prompt + 1) == expected_size(runner, prompt + TOKENS + 1)


def test_a_long_prompt_is_sized_once_and_keeps_the_tokens(
    runner: MLXRunner, growths: list[int]
) -> None:
    prompt = prompt_of(runner, 36)
    assert len(prompt) > 4 * CHUNK
    assert fits(runner, len(prompt))
    tokens, state = generated(runner, prompt)
    assert tokens == reference(runner, prompt)
    assert growths == []  # the first chunk's buffer was resized once, never grown by a chunk
    assert state.cache[0].keys.shape[2] == expected_size(runner, len(prompt) + 1)


def test_a_new_turn_on_a_full_cache_resizes_it_once(runner: MLXRunner, growths: list[int]) -> None:
    """A kept conversation's buffers are full (the prefix store trims their tail): the next
    turn's text and its decode fit after one resize, not a growth per chunk and another at
    the first compiled step."""
    first = prompt_of(runner, 24)
    _, state = generated(runner, first)
    for layer in state.cache:  # as the prefix store keeps it: no room past what it holds
        layer.keys = layer.keys[..., : layer.offset, :]
        layer.values = layer.values[..., : layer.offset, :]
    follow = [*state.tokens, *prompt_of(runner, 8)]
    assert len(follow) - len(state.tokens) > CHUNK  # the new text in two chunks
    assert fits(runner, len(follow))
    tokens, after = generated(runner, follow, state)
    assert tokens == reference(runner, follow)
    assert growths == []
    assert after.cache[0].keys.shape[2] == expected_size(runner, len(follow) + 1)
