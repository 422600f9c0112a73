"""Planning a streamed tier from headers: its layout, its slots, the bytes it will hold."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from gateway.config import TierSettings
from gateway.engines.device import ComputePath
from gateway.engines.experts.plan import ExpertStreaming, expert_layout
from gateway.engines.footprint import model_bytes
from gateway.engines.weights import choose_weights, plan_streamed
from testsupport.synthetic import SyntheticSpec, build_synthetic

from .moe import moe_spec

CPU = ComputePath(device="cpu", blas="openblas", weights="float32", note="")
BUDGET = 16 * 2**30


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_synthetic(moe_spec(), tmp_path_factory.mktemp("moe"))


def test_layout_from_headers(folder: Path) -> None:
    layout = expert_layout(folder)
    assert (layout.layers, layout.experts, layout.top_k) == (4, 16, 4)
    # gate, up (32 x 64) and down (64 x 32) per expert, float16 on disk.
    assert layout.per_expert.stored == 3 * 32 * 64 * 2
    assert layout.per_expert.float32 == 3 * 32 * 64 * 4
    whole = model_bytes(folder)
    assert layout.rest.float32 + 4 * 16 * layout.per_expert.float32 == whole.float32


def test_the_estimate_counts_the_resident_part_and_the_slots(folder: Path) -> None:
    layout = expert_layout(folder)
    choice = plan_streamed(CPU, folder, BUDGET, "auto", ExpertStreaming(slots=3))
    assert choice.mode == "float32"
    assert choice.experts is not None and choice.experts.slots == 3
    assert choice.bytes == layout.rest.float32 + 4 * 3 * layout.per_expert.float32
    assert choice.bytes < choose_weights(CPU, model_bytes(folder), BUDGET).bytes
    described = choice.as_dict()
    assert described["experts"]["slots"] == 3 and described["bytes"] == choice.bytes
    assert "streamed" in described["reason"]


def test_cache_bytes_give_the_slots(folder: Path) -> None:
    per = expert_layout(folder).per_expert.float32
    choice = plan_streamed(CPU, folder, BUDGET, "float32", ExpertStreaming(cache_bytes=4 * 5 * per))
    assert choice.experts is not None and choice.experts.slots == 5
    with pytest.raises(ValueError, match="less than one expert"):
        plan_streamed(CPU, folder, BUDGET, "float32", ExpertStreaming(cache_bytes=per))


def test_default_slots_and_a_cap_at_the_expert_count(folder: Path) -> None:
    default = plan_streamed(CPU, folder, BUDGET, "auto", ExpertStreaming())
    assert default.experts is not None and default.experts.slots == 8  # 2 x top-4 > 16 / 8
    many = plan_streamed(CPU, folder, BUDGET, "auto", ExpertStreaming(slots=99))
    assert many.experts is not None and many.experts.slots == 16


def test_the_form_is_chosen_on_the_streamed_size(folder: Path) -> None:
    # A budget whose half the whole float32 model exceeds, but the streamed one fits.
    layout = expert_layout(folder)
    budget = 2 * (layout.rest.float32 + 4 * 1 * layout.per_expert.float32)
    assert choose_weights(CPU, model_bytes(folder), budget).mode == "native"
    streamed = plan_streamed(CPU, folder, budget, "auto", ExpertStreaming(slots=1))
    assert streamed.mode == "float32" and streamed.bytes == budget // 2


def test_a_model_without_experts_is_refused(tmp_path: Path) -> None:
    dense = build_synthetic(SyntheticSpec("qwen3"), tmp_path / "dense")
    with pytest.raises(ValueError, match="not a mixture-of-experts"):
        plan_streamed(CPU, dense, BUDGET, "auto", ExpertStreaming(slots=2))


def test_settings() -> None:
    tier = TierSettings(model="/m", experts="stream", expert_slots=4, expert_policy="lru")
    assert tier.expert_slots == 4
    with pytest.raises(ValidationError, match="only for tiers of kind 'mlx'"):
        TierSettings(kind="openai", model="m", base_url="http://x/v1", experts="stream")
    with pytest.raises(ValidationError, match="need experts = 'stream'"):
        TierSettings(model="/m", expert_slots=4)
    with pytest.raises(ValidationError, match="not both"):
        TierSettings(model="/m", experts="stream", expert_slots=4, expert_cache_bytes=10**9)
