"""A tier that streams its experts from disk answers through the openai SDK with the same
greedy text as the same model fully resident, and shows its hits and misses in /health and
/metrics; a model without experts is refused at start with a clear message."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from testsupport.process import RunningGateway, start_gateway
from testsupport.synthetic import SyntheticSpec, build_synthetic

pytestmark = pytest.mark.e2e

MESSAGES = [{"role": "user", "content": "Tell me about lighthouses and the sea."}]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    spec = SyntheticSpec(
        "qwen3_moe",
        hidden_size=64,
        num_hidden_layers=4,
        dtype="float16",
        overrides={"num_experts": 16, "num_experts_per_tok": 4, "moe_intermediate_size": 32},
    )
    return build_synthetic(spec, tmp_path_factory.mktemp("moe"))


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory, folder: Path) -> Iterator[RunningGateway]:
    config = {
        "weights": "float32",
        "tiers": {
            "streamed": {
                "model": str(folder),
                "experts": "stream",
                "expert_slots": 5,
                "preload": True,
            },
            "resident": {"model": str(folder)},
        },
        "cache": {"prefix_cache_bytes": 0, "persist_prefix_bytes": 0},
    }
    running = start_gateway(tmp_path_factory.mktemp("gateway"), config)
    yield running
    running.stop()


def counter(text: str, name: str) -> float:
    match = re.search(rf'{name}_total\{{tier="streamed"\}} ([0-9.e+]+)', text)
    assert match, name
    return float(match.group(1))


def test_a_streamed_tier_answers_as_the_resident_one(gateway: RunningGateway) -> None:
    client = gateway.openai()
    answers = {
        tier: client.chat.completions.create(
            model=tier, messages=MESSAGES, max_tokens=12, temperature=0
        )
        for tier in ("streamed", "resident")
    }
    streamed, resident = answers["streamed"], answers["resident"]
    assert streamed.choices[0].message.content
    assert streamed.choices[0].message.content == resident.choices[0].message.content
    assert streamed.usage.completion_tokens == 12

    health = gateway.http().get("/health").json()["tiers"]
    experts = health["streamed"]["weights"]["experts"]
    assert experts["mode"] == "stream" and experts["slots"] == 5 and experts["policy"] == "lfu"
    assert experts["misses"] > 0 and 0.0 <= experts["hit_ratio"] < 1.0
    assert experts["bytes_read"] > 0
    # The estimate counts the resident part and the slots, not the whole model.
    assert health["streamed"]["weights"]["bytes"] < health["resident"]["weights"]["bytes"]
    assert "experts" not in health["resident"]["weights"]

    text = gateway.http().get("/metrics").text
    assert counter(text, "gateway_expert_cache_misses") == experts["misses"]
    assert counter(text, "gateway_expert_cache_hits") == experts["hits"]
    assert counter(text, "gateway_expert_bytes_read") == experts["bytes_read"]
    assert 'gateway_expert_read_seconds_count{tier="streamed"}' in text


def test_streaming_a_model_without_experts_fails_at_start(tmp_path: Path) -> None:
    dense = build_synthetic(SyntheticSpec("qwen3"), tmp_path / "dense")
    config = {"tiers": {"small": {"model": str(dense), "experts": "stream"}}}
    with pytest.raises(RuntimeError, match="not a mixture-of-experts model"):
        start_gateway(tmp_path / "gateway", config)
