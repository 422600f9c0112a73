"""An import is verified by loading it as the gateway loads it and running it once."""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx
import pytest

from gateway.engines.model_files import logits_are_finite, save_weights
from testsupport.synthetic import SyntheticSpec, build_synthetic

PROMPT = "The capital of France is"


@pytest.mark.parametrize("quantization", [None, {"group_size": 32, "bits": 4}])
def test_a_sound_model_has_finite_logits(
    tmp_path: Path, quantization: dict[str, int] | None
) -> None:
    folder = build_synthetic(
        SyntheticSpec("qwen3", dtype="bfloat16", quantization=quantization), tmp_path / "m"
    )
    assert logits_are_finite(folder, PROMPT)


def test_a_damaged_weight_shows_as_non_finite_logits(tmp_path: Path) -> None:
    folder = build_synthetic(SyntheticSpec("llama"), tmp_path / "m")
    weights = dict(mx.load(str(folder / "model.safetensors")))
    norm = next(name for name in weights if name.endswith("norm.weight"))
    weights[norm] = mx.full(weights[norm].shape, float("nan"), dtype=weights[norm].dtype)
    save_weights(folder / "model.safetensors", weights)
    assert not logits_are_finite(folder, PROMPT)
