"""One gateway, one local tier per model source, each a small synthetic model placed where
that source keeps models (an mlx-lm folder, a hand-made Hugging Face cache, a .gguf file, an
Ollama store, LM Studio's folder with MLX and with GGUF); every tier answers a chat through
the official ``openai`` SDK. And nothing is downloaded at serve time: an uncached ``hf:`` id
stops the start at once, naming ``gateway models pull``."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from testsupport.process import RunningGateway, start_gateway
from testsupport.synthetic import (
    SyntheticSpec,
    build_synthetic,
    place_in_hf_cache,
    write_ollama_model,
)

pytestmark = pytest.mark.e2e


@dataclass
class Machine:
    """Where the synthetic models were put, and the tiers that name them."""

    env: dict[str, str]
    tiers: dict[str, str]  # tier -> model reference


def build_machine(root: Path) -> Machine:
    home, hub, ollama_root = root / "home", root / "hub", root / "ollama"
    studio = home / ".lmstudio" / "models"
    tiers: dict[str, str] = {}
    folder = build_synthetic(SyntheticSpec("qwen3"), root / "qwen3-folder")
    tiers["folder"] = str(folder)
    llama = build_synthetic(SyntheticSpec("llama", seed=1), root / "llama")
    place_in_hf_cache(llama, hub, "test/llama-tiny")
    tiers["hf"] = "hf:test/llama-tiny"
    build_synthetic(SyntheticSpec("qwen2", seed=2), studio / "mlx-community" / "qwen2-tiny")
    tiers["studio_mlx"] = "lmstudio:mlx-community/qwen2-tiny"
    from testsupport.synthetic_gguf import write_gguf

    (root / "files").mkdir()
    gguf = write_gguf(llama, root / "files" / "llama-tiny-Q8_0.gguf", "Q8_0")
    tiers["gguf"] = str(gguf)
    write_ollama_model(
        ollama_root, "llama-tiny", "q8", gguf.read_bytes(), params={"stop": ["<|im_end|>"]}
    )
    tiers["ollama"] = "ollama:llama-tiny:q8"
    studio_gguf = studio / "lmstudio-community" / "qwen3-tiny-GGUF"
    studio_gguf.mkdir(parents=True)
    write_gguf(folder, studio_gguf / "qwen3-tiny-Q8_0.gguf", "Q8_0")
    tiers["studio_gguf"] = "lmstudio:lmstudio-community/qwen3-tiny-GGUF"
    env = {"HOME": str(home), "HF_HUB_CACHE": str(hub), "OLLAMA_MODELS": str(ollama_root)}
    return Machine(env, tiers)


@pytest.fixture(scope="module")
def machine(tmp_path_factory: pytest.TempPathFactory) -> Machine:
    return build_machine(tmp_path_factory.mktemp("machine"))


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory, machine: Machine) -> Iterator[RunningGateway]:
    workdir = tmp_path_factory.mktemp("gateway")
    config = {
        "cache_dir": str(workdir / "cache"),  # the imports stay in this test's folder
        "memory_budget_bytes": 16 * 1024**3,
        "tiers": {
            name: {"kind": "mlx", "model": model, "keep_alive_seconds": 60}
            for name, model in machine.tiers.items()
        },
    }
    running = start_gateway(workdir, config, extra_env=machine.env)
    yield running
    running.stop()


@pytest.mark.parametrize("tier", ["folder", "hf", "studio_mlx", "gguf", "ollama", "studio_gguf"])
def test_each_source_answers_through_the_sdk(
    gw: RunningGateway, machine: Machine, tier: str
) -> None:
    completion = gw.openai().chat.completions.create(
        model=tier, messages=[{"role": "user", "content": "Hello"}], max_tokens=8
    )
    choice = completion.choices[0]
    assert choice.finish_reason in ("stop", "length")
    usage = completion.usage
    assert usage is not None and usage.prompt_tokens > 0
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    # The tier's model id is the reference as written, and clients may use it too.
    assert completion.model in (tier, machine.tiers[tier])
    health = gw.http().get("/health").json()["tiers"][tier]
    assert health["model"] == machine.tiers[tier]
    assert health["loaded"] is True


def test_v1_models_stays_the_served_tiers(gw: RunningGateway, machine: Machine) -> None:
    ids = {m.id for m in gw.openai().models.list().data}
    assert set(machine.tiers) <= ids
    assert "smollm2-135m-instruct" not in ids  # known, but not configured here


def test_an_uncached_hf_model_stops_the_start_at_once(tmp_path: Path) -> None:
    started = time.perf_counter()
    with pytest.raises(RuntimeError) as failed:
        start_gateway(
            tmp_path,
            {"tiers": {"big": {"kind": "mlx", "model": "hf:mlx-community/Qwen3-8B-4bit"}}},
            extra_env={"HF_HUB_CACHE": str(tmp_path / "empty-hub"), "HF_HUB_OFFLINE": "1"},
        )
    elapsed = time.perf_counter() - started
    assert "gateway models pull hf:mlx-community/Qwen3-8B-4bit" in str(failed.value)
    assert elapsed < 10, elapsed
