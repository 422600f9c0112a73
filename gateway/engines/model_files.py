"""The MLX side of making a model folder: arrays and files for the importers.

The model store (``gateway.modelstore``) finds, converts and verifies models, but MLX stays
inside ``gateway.engines`` (an import-linter contract in ``pyproject.toml``): the GGUF
converter builds its tensors and writes ``model.safetensors`` through these functions, and
an import is checked by running the model once here. Arrays are MLX arrays, typed ``Any``
so that callers need not import MLX to name them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np


def float_tensor(raw: np.ndarray, kind: str, widened: Callable[[], np.ndarray]) -> Any:
    """A float tensor in its own width: F16 stays float16, BF16 bfloat16 (``raw`` holds its
    bytes); any other kind is ``widened()`` (float32)."""
    import mlx.core as mx

    if kind == "F16":
        return mx.array(raw.view(np.float16))
    if kind == "BF16":
        return mx.array(raw.view(np.uint16)).view(mx.bfloat16)
    return mx.array(widened())


def minus(array: Any, offset: float) -> Any:
    """``array - offset`` computed in float32, kept in the array's own width."""
    import mlx.core as mx

    return (array.astype(mx.float32) - offset).astype(array.dtype)


def in_width(array: Any, width: str) -> Any:
    """``array`` cast to the float ``width`` (``float16``, ``bfloat16``, ``float32``)."""
    import mlx.core as mx

    return array.astype(getattr(mx, width))


def from_numpy(array: np.ndarray) -> Any:
    import mlx.core as mx

    return mx.array(array)


def save_weights(path: Path, weights: dict[str, Any]) -> None:
    """Write ``weights`` as the safetensors file mlx-lm loads (``format: mlx``)."""
    import mlx.core as mx

    mx.save_safetensors(str(path), weights, metadata={"format": "mlx"})


def logits_are_finite(folder: Path, prompt: str) -> bool:
    """Load the model in ``folder`` as the gateway loads it (``weights.load_model``) and run
    ``prompt`` through it once: whether every logit is finite (an import that went wrong
    shows as inf or nan)."""
    import mlx.core as mx

    from gateway.engines.weights import load_model

    # On a CPU float32 activations (MLX's CPU gather_mm, MoE experts, takes float32 only: a
    # float16 or bfloat16 MoE would fail here though it serves fine), quantized weights kept
    # packed: the cheapest form that computes as serving does.
    cpu = mx.default_device().type == mx.DeviceType.cpu
    model, tokenizer, _config = load_model(folder, "quantized" if cpu else "native")
    logits = model(mx.array(tokenizer.encode(prompt))[None])
    return bool(mx.all(mx.isfinite(logits)).item())
