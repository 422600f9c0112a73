"""Which form a model's weights take on each compute path, and what each form costs."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.engines.device import ComputePath
from gateway.engines.footprint import ModelBytes, model_bytes
from gateway.engines.weights import choose_weights

CPU_OPENBLAS = ComputePath("cpu", "openblas:x", "float32", "")
CPU_REFERENCE = ComputePath("cpu", "reference", "4bit", "")
METAL = ComputePath("metal", "accelerate", "4bit", "")
GiB = 2**30
# A 7B model in 4 bits: 3.9 GB stored, 28 GB as float32, 4.2 GB with float32 scales.
SEVEN_B_4BIT = ModelBytes(
    stored=int(3.9 * GiB), float32=28 * GiB, quantized=int(4.2 * GiB), is_quantized=True
)
SMALL_4BIT = ModelBytes(stored=100_000, float32=800_000, quantized=120_000, is_quantized=True)
SMALL_BF16 = ModelBytes(stored=400_000, float32=800_000, quantized=800_000, is_quantized=False)
BIG_BF16 = ModelBytes(stored=16 * GiB, float32=32 * GiB, quantized=32 * GiB, is_quantized=False)


def test_auto_dequantizes_a_model_whose_float32_copy_fits_half_the_budget() -> None:
    choice = choose_weights(CPU_OPENBLAS, SMALL_4BIT, budget_bytes=18 * GiB)
    assert (choice.mode, choice.bytes) == ("float32", 800_000)


def test_auto_keeps_a_large_model_quantized_with_float32_activations() -> None:
    choice = choose_weights(CPU_OPENBLAS, SEVEN_B_4BIT, budget_bytes=18 * GiB)
    assert (choice.mode, choice.bytes) == ("quantized", int(4.2 * GiB))
    assert "float32 activations" in choice.reason


def test_half_the_budget_is_the_line() -> None:
    model = ModelBytes(stored=1, float32=10 * GiB, quantized=2, is_quantized=True)
    assert choose_weights(CPU_OPENBLAS, model, 20 * GiB).mode == "float32"
    assert choose_weights(CPU_OPENBLAS, model, 20 * GiB - 1).mode == "quantized"


def test_an_explicit_preference_wins_over_the_budget() -> None:
    assert choose_weights(CPU_OPENBLAS, SEVEN_B_4BIT, 18 * GiB, "float32").mode == "float32"
    assert choose_weights(CPU_OPENBLAS, SMALL_4BIT, 18 * GiB, "4bit").mode == "quantized"


def test_unquantized_models_are_cast_to_float32_or_kept_as_stored() -> None:
    assert choose_weights(CPU_OPENBLAS, SMALL_BF16, 18 * GiB).mode == "float32"
    big = choose_weights(CPU_OPENBLAS, BIG_BF16, 18 * GiB)
    assert (big.mode, big.bytes) == ("native", 16 * GiB)
    assert "slow" in big.reason


def test_without_openblas_quantized_models_stay_quantized() -> None:
    assert choose_weights(CPU_REFERENCE, SMALL_4BIT, 18 * GiB).mode == "quantized"


@pytest.mark.parametrize("model", [SMALL_4BIT, SEVEN_B_4BIT, BIG_BF16])
def test_metal_keeps_the_model_as_stored(model: ModelBytes) -> None:
    choice = choose_weights(METAL, model, 18 * GiB)
    assert (choice.mode, choice.bytes) == ("native", model.stored)


def test_model_bytes_match_what_mlx_holds_in_each_form(tmp_path: Path) -> None:
    """The header arithmetic against MLX's own count of the loaded parameters."""
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm import load

    from gateway.engines.weights import apply_weights
    from testsupport.synthetic import SyntheticSpec, build_synthetic

    folder = build_synthetic(
        SyntheticSpec("qwen3", dtype="float16", quantization={"group_size": 32, "bits": 4}),
        tmp_path / "m",
    )
    sizes = model_bytes(folder)
    assert sizes.is_quantized
    for mode, expected in (
        ("native", sizes.stored),
        ("quantized", sizes.quantized),
        ("float32", sizes.float32),
    ):
        model = load(str(folder), lazy=True)[0]
        apply_weights(model, mode)  # type: ignore[arg-type]
        mx.eval(model.parameters())
        held = sum(a.nbytes for _, a in tree_flatten(model.parameters()))
        assert held == expected, mode


def test_quantized_prefill_is_computed_dequantized_and_decode_stays_quantized(
    tmp_path: Path,
) -> None:
    """A pass over many tokens multiplies by the dequantized weight (sgemm); one token keeps
    MLX's quantized kernel: same logits within float rounding either way."""
    import mlx.core as mx
    import mlx.nn as nn
    from mlx_lm import load

    from gateway.engines.weights import apply_weights
    from testsupport.synthetic import SyntheticSpec, build_synthetic

    folder = build_synthetic(
        SyntheticSpec("llama", quantization={"group_size": 32, "bits": 4}), tmp_path / "m"
    )
    plain = load(str(folder))[0]
    plain.set_dtype(mx.float32)
    served = load(str(folder), lazy=True)[0]
    apply_weights(served, "quantized")
    layers = [m for _, m in served.named_modules() if isinstance(m, nn.QuantizedLinear)]
    assert layers and all(type(m) is not nn.QuantizedLinear for m in layers)
    many = mx.array([list(range(300, 340))])
    one = mx.array([[300]])
    assert float(mx.abs(served(many) - plain(many)).max()) < 1e-3
    assert mx.array_equal(served(one), plain(one))
