"""How many bytes a model folder will take once loaded, read from its safetensors headers.

Used to decide, before loading, whether a model fits the memory budget. Nothing is loaded:
a safetensors file starts with a little-endian u64 length and a JSON header of every
tensor's dtype and shape.
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

DTYPE_BYTES = {"F32": 4, "F16": 2, "BF16": 2, "U32": 4, "I32": 4, "U8": 1, "I8": 1, "F64": 8}
FLOAT32_BYTES = 4


def tensor_shapes(folder: Path) -> dict[str, tuple[str, tuple[int, ...]]]:
    shapes: dict[str, tuple[str, tuple[int, ...]]] = {}
    for file in sorted(folder.glob("*.safetensors")):
        with file.open("rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            header = json.loads(handle.read(length))
        for name, info in header.items():
            if name != "__metadata__":
                shapes[name] = (info["dtype"], tuple(info["shape"]))
    return shapes


def loaded_bytes(folder: Path, dequantized: bool) -> int:
    """Bytes of weights in memory: as stored, or as float32 after dequantizing.

    A quantized ``<name>.weight`` (packed uint32) has ``<name>.scales`` beside it with one
    scale per group: its element count is the scales' count times the group size
    (``config.json``'s ``quantization``, per layer where the layer overrides it).
    """
    shapes = tensor_shapes(folder)
    quantization = json.loads((folder / "config.json").read_text()).get("quantization") or {}
    total = 0
    for name, (dtype, shape) in shapes.items():
        count = math.prod(shape)
        if not dequantized:
            total += count * DTYPE_BYTES.get(dtype, 4)
            continue
        stem = name.rsplit(".", 1)[0]
        quantized = f"{stem}.scales" in shapes
        if quantized and name.endswith((".scales", ".biases")):
            continue  # folded into the float32 weight
        if quantized and name.endswith(".weight"):
            layer = quantization.get(stem)
            group_size = int(
                (layer if isinstance(layer, dict) else quantization).get("group_size", 64)
            )
            count = math.prod(shapes[f"{stem}.scales"][1]) * group_size
        total += count * FLOAT32_BYTES
    return total
