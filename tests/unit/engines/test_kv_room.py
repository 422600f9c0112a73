"""Room for a whole prompt made at its first prefill chunk (``gateway.engines.kv_room``), on
the real SmolLM2: the cache is allocated once, its step is mlx-lm's again afterwards, and the
tokens are mlx-lm's own."""

from __future__ import annotations

import mlx.core as mx
import pytest
from mlx_lm.generate import generate_step
from mlx_lm.models.cache import KVCache

from gateway.config import default_cache_dir
from gateway.engines.device import choose_compute_path
from gateway.engines.kv_room import STEP, room_for
from gateway.engines.mlx_runner import MLXRunner
from gateway.modelstore.store import DEFAULT_MODEL_ID, ModelStore
from gateway.seam.backend import SamplingParams, TokenEvent


@pytest.fixture(scope="module")
def runner() -> MLXRunner:
    folder = ModelStore(default_cache_dir()).path_for(DEFAULT_MODEL_ID)
    return MLXRunner(DEFAULT_MODEL_ID, folder, choose_compute_path())


def long_prompt(runner: MLXRunner) -> list[int]:
    text = " ".join(f"Item {i} is a river in the north." for i in range(60))
    return runner.render_chat([{"role": "user", "content": f"{text} Name one."}])


def test_a_chunked_prefill_allocates_the_room_once(runner: MLXRunner) -> None:
    tokens = long_prompt(runner)[:600]
    cache = runner.new_cache()
    capacities: set[int] = set()
    for _done in runner.prefill(tokens, cache):  # chunks of 64 on a CPU
        capacities.add(cache[0].keys.shape[2])
    assert capacities == {768}  # 600 rounded up to 256s, from the first chunk on
    assert cache[0].offset == 600
    assert all("step" not in vars(layer) for layer in cache)  # mlx-lm's 256 again
    assert cache[0].step == STEP


def test_room_for_more_tokens_than_the_chunks_and_a_prefill_left_midway(runner: MLXRunner) -> None:
    tokens = long_prompt(runner)[:300]
    cache = runner.new_cache()
    chunks = runner.prefill(tokens, cache, room=1000)
    next(chunks)
    assert cache[0].keys.shape[2] == 1024
    chunks.close()  # cancelled mid-prefill: the step is restored all the same
    assert all("step" not in vars(layer) for layer in cache)
    with room_for(cache, 100):  # within one step: nothing changes
        assert all("step" not in vars(layer) for layer in cache)
    assert all(type(layer) is KVCache for layer in cache)


def test_greedy_tokens_of_a_long_prompt_are_mlx_lms(runner: MLXRunner) -> None:
    prompt = long_prompt(runner)
    assert len(prompt) > 4 * 64  # several chunks and a tail
    reference = [
        int(token)
        for token, _ in generate_step(
            mx.array(prompt), runner.model, max_tokens=12, prompt_cache=runner.new_cache()
        )
    ]
    ends = [i for i, token in enumerate(reference) if token in runner.eos_token_ids]
    reference = reference[: ends[0]] if ends else reference  # the end token is not sent
    events = runner.generate(prompt, SamplingParams(max_tokens=12, temperature=0.0))
    produced = [t for e in events if isinstance(e, TokenEvent) for t in e.token_ids]
    assert produced == reference and len(produced) >= 4
