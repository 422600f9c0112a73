"""The safetensors file written slice by slice reads back, through MLX, as the arrays given."""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from gateway.modelstore.gguf.writer import Planned, SafetensorsWriter, to_width


def test_slices_written_in_any_order_read_back_whole(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    weight = rng.integers(0, 2**32, size=(7, 4, 3), dtype=np.uint32)
    scales = rng.standard_normal((7, 4, 5)).astype(np.float32)
    norm = rng.standard_normal(9).astype(np.float32)
    plan = [
        Planned("w", "uint32", weight.shape),
        Planned("s", "float32", scales.shape),
        Planned("n16", "float16", norm.shape),
        Planned("nbf", "bfloat16", norm.shape),
    ]
    path = tmp_path / "model.safetensors"
    with SafetensorsWriter(path, plan, {"format": "mlx"}) as writer:
        rows_w, rows_s = weight.reshape(28, 3), scales.reshape(28, 5)
        for start in (20, 0, 10):  # rows out of order, in uneven slices
            writer.write("w", rows_w[start : start + 10], start)
            writer.write("s", rows_s[start : start + 10], start)
        writer.write("n16", to_width(norm, "float16"))
        writer.write("nbf", to_width(norm, "bfloat16"))
    loaded, metadata = mx.load(str(path), return_metadata=True)
    assert metadata == {"format": "mlx"}
    assert np.array_equal(np.array(loaded["w"]), weight)
    assert np.array_equal(np.array(loaded["s"]), scales)
    assert np.array_equal(np.array(loaded["n16"]), norm.astype(np.float16))
    assert loaded["nbf"].dtype == mx.bfloat16
    assert mx.array_equal(loaded["nbf"], mx.array(norm).astype(mx.bfloat16)).item()


def test_a_tensor_left_short_is_an_error(tmp_path: Path) -> None:
    plan = [Planned("w", "float32", (4, 2))]
    writer = SafetensorsWriter(tmp_path / "m.safetensors", plan, {})
    writer.write("w", np.zeros((3, 2), np.float32))
    with pytest.raises(ValueError, match="not written whole"):
        writer.close()
