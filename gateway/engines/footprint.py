"""How many bytes a model folder will take once loaded, read from its safetensors headers.

Used to decide, before loading, whether a model fits the memory budget and in which form its
weights are held (``gateway.engines.weights``). Nothing is loaded: a safetensors file starts
with a little-endian u64 length and a JSON header of every tensor's dtype and shape.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DTYPE_BYTES = {"F32": 4, "F16": 2, "BF16": 2, "U32": 4, "I32": 4, "U8": 1, "I8": 1, "F64": 8}
FLOAT_DTYPES = frozenset({"F32", "F16", "BF16", "F64"})
FLOAT32_BYTES = 4


@dataclass(frozen=True)
class ModelBytes:
    """Bytes of a model's weights in each form it can be held in (from its headers)."""

    stored: int  # as on disk
    float32: int  # everything dequantized to float32
    quantized: int  # packed weights as stored, every float (scales, biases, norms) float32
    is_quantized: bool


# A header is a few hundred bytes per tensor: anything near this is not a safetensors file.
MAX_HEADER_BYTES = 100 * 1024 * 1024


def read_safetensors_header(file: Path) -> tuple[int, dict[str, dict[str, Any]]]:
    """A safetensors file's data offset and its tensors' entries (dtype, shape,
    data_offsets), checked: a user's file may be truncated or not a safetensors file at
    all, which must be a clear ``ValueError`` naming it, never a crash deeper in."""
    with file.open("rb") as handle:
        prefix = handle.read(8)
        if len(prefix) != 8:
            raise ValueError(f"{file}: too short for a safetensors file")
        (length,) = struct.unpack("<Q", prefix)
        if length > MAX_HEADER_BYTES:
            raise ValueError(f"{file}: not a safetensors file (header of {length} bytes)")
        header = json.loads(handle.read(length))
    if not isinstance(header, dict):
        raise ValueError(f"{file}: the safetensors header is not an object")
    tensors: dict[str, dict[str, Any]] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if not (
            isinstance(info, dict)
            and isinstance(info.get("dtype"), str)
            and isinstance(info.get("shape"), list)
            and all(isinstance(d, int) and d >= 0 for d in info["shape"])
            and isinstance(info.get("data_offsets"), list)
            and len(info["data_offsets"]) == 2
            and all(isinstance(o, int) and o >= 0 for o in info["data_offsets"])
        ):
            raise ValueError(f"{file}: malformed safetensors entry for {name!r}")
        tensors[name] = info
    return 8 + length, tensors


def tensor_shapes(folder: Path) -> dict[str, tuple[str, tuple[int, ...]]]:
    shapes: dict[str, tuple[str, tuple[int, ...]]] = {}
    for file in sorted(folder.glob("*.safetensors")):
        for name, info in read_safetensors_header(file)[1].items():
            shapes[name] = (info["dtype"], tuple(info["shape"]))
    return shapes


def model_bytes(folder: Path) -> ModelBytes:
    """The three sizes of a model folder's weights.

    A quantized ``<name>.weight`` (packed uint32) has ``<name>.scales`` beside it with one
    scale per group: its element count is the scales' count times the group size
    (``config.json``'s ``quantization``, per layer where the layer overrides it).
    """
    config = json.loads((folder / "config.json").read_text())
    quantization = config.get("quantization") or config.get("quantization_config") or {}
    return bytes_of(tensor_shapes(folder), quantization)


def bytes_of(
    shapes: dict[str, tuple[str, tuple[int, ...]]],
    quantization: dict[str, Any],
    only: set[str] | None = None,
) -> ModelBytes:
    """``model_bytes`` of the tensors in ``only`` (all when None; ``shapes`` still gives
    each packed weight its scales): a part of a model, e.g. its experts."""
    stored = float32 = quantized = 0
    is_quantized = False
    for name, (dtype, shape) in shapes.items():
        if only is not None and name not in only:
            continue
        count = math.prod(shape)
        size = count * DTYPE_BYTES.get(dtype, 4)
        stored += size
        stem = name.rsplit(".", 1)[0]
        packed = f"{stem}.scales" in shapes
        if packed and name.endswith((".scales", ".biases")):
            quantized += count * FLOAT32_BYTES
            continue  # folded into the float32 weight
        if packed and name.endswith(".weight"):
            is_quantized = True
            quantized += size
            layer = quantization.get(stem)
            group_size = int(
                (layer if isinstance(layer, dict) else quantization).get("group_size", 64)
            )
            float32 += math.prod(shapes[f"{stem}.scales"][1]) * group_size * FLOAT32_BYTES
            continue
        float32 += count * FLOAT32_BYTES
        quantized += count * FLOAT32_BYTES if dtype in FLOAT_DTYPES else size
    return ModelBytes(stored, float32, quantized, is_quantized)


def loaded_bytes(folder: Path, dequantized: bool) -> int:
    """Bytes of weights in memory: as stored, or as float32 after dequantizing."""
    sizes = model_bytes(folder)
    return sizes.float32 if dequantized else sizes.stored
