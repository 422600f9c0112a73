"""Does a prefill chunk of a shape not seen before pay a kernel compile? (issue 23, GPU)

Loads MODEL_FOLDER and prefills a ~5,500-token prompt into fresh caches, chunk by chunk,
timing each chunk: fixed 512-token chunks twice, then the same varying power-of-two sequence
twice, then another varying sequence. A second pass at the speed of a warm one while a first
pass of the same shapes is slow says the shapes, not the work, cost the time.
Usage: ``python ops/gpu/shapes.py MODEL_FOLDER [MAX_TOKENS]`` (a shorter prompt: a CPU check).
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

from bench.priority import LONG_PROMPT
from gateway.engines.device import choose_compute_path


def main(folder: str, max_tokens: int | None = None) -> int:
    compute = choose_compute_path()
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    from gateway.engines.weights import default_mode, load_model

    model, tokenizer, _ = load_model(Path(folder), default_mode(compute))
    prompt = tokenizer.apply_chat_template(LONG_PROMPT, add_generation_prompt=True)[:max_tokens]

    def chunked(sizes: list[int]) -> list[tuple[int, float]]:
        cache, done, times = make_prompt_cache(model), 0, []
        for size in sizes:
            if done >= len(prompt):
                break
            started = time.perf_counter()
            model(mx.array(prompt[done : done + size])[None], cache=cache)
            mx.eval([c.state for c in cache])
            times.append((size, 1e3 * (time.perf_counter() - started)))
            done += size
        return times

    def report(name: str, times: list[tuple[int, float]]) -> None:
        ms = sorted(t for _, t in times)
        print(
            f"{name}: {len(times)} chunks, total {sum(ms):.0f} ms, median {ms[len(ms) // 2]:.1f}, "
            f"max {ms[-1]:.1f}; first 12: {[round(t, 1) for _, t in times[:12]]}",
            flush=True,
        )

    chunked([512] * 2)  # the model's own first shapes
    fixed = [512] * 11
    random.seed(1)
    varying = [random.choice([8, 16, 32, 64, 128, 256, 512]) for _ in range(200)]
    other = [random.choice([8, 16, 32, 64, 128, 256, 512]) for _ in range(200)]
    for name, sizes in (("fixed 512, pass 1", fixed), ("fixed 512, pass 2", fixed),
                        ("varying, pass 1", varying), ("varying, pass 2", varying),
                        ("other varying", other)):  # fmt: skip
        report(name, chunked(sizes))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], *(int(a) for a in sys.argv[2:3])))
