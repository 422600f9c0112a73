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
    """Load the model in ``folder`` as the gateway loads it (``weights.load_model``'s form)
    and run ``prompt`` through it once: whether every logit is finite (an import that went
    wrong shows as inf or nan).

    One layer at a time (``_OneLayerAtATime``): the weights stay unread until their layer
    computes, and a layer's are freed once it has, so the check's memory is the embeddings
    and one layer, not the model (issue 31: a 7 GB import must not need 7 GB more)."""
    import mlx.core as mx
    from mlx_lm import load

    from gateway.engines.weights import apply_weights

    # On a CPU float32 activations (MLX's CPU gather_mm, MoE experts, takes float32 only: a
    # float16 or bfloat16 MoE would fail here though it serves fine), quantized weights kept
    # packed: the cheapest form that computes as serving does.
    cpu = mx.default_device().type == mx.DeviceType.cpu
    model, tokenizer = load(str(folder), lazy=True)[:2]
    apply_weights(model, "quantized" if cpu else "native", evaluate=False)
    # The model's own list of layers (``model.layers`` is a copy in mlx-lm's pipelined
    # models: the inner model's is the one it iterates), wrapped; none found: computed whole.
    layers = _own_layers(model)
    if layers is not None:
        layers[:] = [_OneLayerAtATime(layer) for layer in layers]
    logits = model(mx.array(tokenizer.encode(prompt))[None])
    return bool(mx.all(mx.isfinite(logits)).item())


def _own_layers(model: Any) -> list[Any] | None:
    for holder in (getattr(model, "model", None), getattr(model, "language_model", None), model):
        layers = getattr(holder, "layers", None)
        if isinstance(layers, list) and layers and getattr(holder, "layers", None) is layers:
            return layers
    return None


class _OneLayerAtATime:
    """A model's layer that computes its output at once and then lets its weights go."""

    def __init__(self, layer: Any) -> None:
        self.layer = layer

    def __getattr__(self, name: str) -> Any:  # what the model reads of a layer (its kind)
        return getattr(self.__dict__["layer"], name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        import mlx.core as mx

        out = self.layer(*args, **kwargs)
        mx.eval(out)
        self.__dict__["layer"] = _Spent()
        mx.clear_cache()
        return out


class _Spent:
    """A layer whose weights were freed after its one pass."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError("a verified layer ran twice")
