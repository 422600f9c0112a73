"""Model layouts built by hand in temporary folders: cheap stand-ins for the real thing.

An mlx-lm folder here is a ``config.json`` and a ``model.safetensors`` whose header is real
(and whose data is zeros): everything the catalog reads, nothing it should not need.
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path
from typing import Any

from testsupport.synthetic import place_in_hf_cache, write_ollama_model

__all__ = ["place_in_hf_cache", "write_mlx_folder", "write_ollama_model", "write_safetensors"]

_BYTES = {"F32": 4, "F16": 2, "BF16": 2, "U32": 4}


def write_safetensors(path: Path, tensors: dict[str, tuple[str, tuple[int, ...]]]) -> None:
    """A valid safetensors file of zero-filled tensors."""
    header: dict[str, Any] = {}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        size = math.prod(shape) * _BYTES[dtype]
        header[name] = {
            "dtype": dtype,
            "shape": list(shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(offset))


def write_mlx_folder(
    folder: Path,
    *,
    model_type: str = "llama",
    hidden: int = 64,
    layers: int = 2,
    vocab: int = 256,
    bits: int | None = None,
    group_size: int = 64,
    context: int = 4096,
) -> Path:
    """A config and weights' headers of a small llama-shaped model (quantized with ``bits``)."""
    folder.mkdir(parents=True, exist_ok=True)
    tensors: dict[str, tuple[str, tuple[int, ...]]] = {
        "model.embed_tokens.weight": ("F16", (vocab, hidden)),
        "model.norm.weight": ("F16", (hidden,)),
    }
    for layer in range(layers):
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            stem = f"model.layers.{layer}.self_attn.{proj}"
            if bits:
                tensors[f"{stem}.weight"] = ("U32", (hidden, hidden * bits // 32))
                tensors[f"{stem}.scales"] = ("F16", (hidden, hidden // group_size))
                tensors[f"{stem}.biases"] = ("F16", (hidden, hidden // group_size))
            else:
                tensors[f"{stem}.weight"] = ("F16", (hidden, hidden))
    write_safetensors(folder / "model.safetensors", tensors)
    config: dict[str, Any] = {
        "model_type": model_type,
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "vocab_size": vocab,
        "max_position_embeddings": context,
    }
    if bits:
        config["quantization"] = {"group_size": group_size, "bits": bits}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ x }}"}))
    (folder / "tokenizer.json").write_text(
        json.dumps({"added_tokens": [{"content": "<think>"}, {"content": "<tool_call>"}]})
    )
    return folder


def write_gguf_stub(
    path: Path,
    *,
    architecture: str = "llama",
    quant: str = "Q8_0",
    context: int = 2048,
    file_type: int | None = None,
) -> Path:
    """A small but valid GGUF (gguf-py's writer): header, metadata, two tensors;
    ``file_type`` is ``general.file_type`` (llama.cpp's ``llama_ftype``), absent by default."""
    import numpy as np
    from gguf import GGMLQuantizationType, GGUFWriter
    from gguf.quants import quantize

    path.parent.mkdir(parents=True, exist_ok=True)
    writer = GGUFWriter(str(path), architecture)
    writer.add_context_length(context)
    writer.add_name(path.stem)
    writer.add_chat_template("{{ messages }}")
    if file_type is not None:
        writer.add_file_type(file_type)
    qtype = GGMLQuantizationType[quant]
    weight = np.zeros((64, 64), dtype=np.float32)
    writer.add_tensor("blk.0.attn_q.weight", quantize(weight, qtype), raw_dtype=qtype)
    writer.add_tensor("output_norm.weight", np.ones(64, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
