"""Turn a GGUF file into an mlx-lm model folder, and say exactly what happened to each tensor.

The folder holds config.json, model.safetensors (MLX affine quantization with float32 scales
and biases where the GGUF is quantized, the GGUF's float width otherwise) and the tokenizer
files with the GGUF's chat template. The returned import record lists, per ggml type, how
many tensors were repacked bit-exactly and which were re-quantized, with the largest error
against gguf-py's own dequantization.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from gateway.engines.model_files import float_tensor, from_numpy, in_width, minus, save_weights
from gateway.modelstore.gguf.architectures import SUPPORTED_ARCHITECTURES, Architecture
from gateway.modelstore.gguf.quants import (
    FLOAT_TYPES,
    GROUP_SIZE,
    Affine,
    mlx_bits,
    repack,
    requantize,
    requantize_8bit_q6_k,
)
from gateway.modelstore.gguf.reader import GGUFFile, TensorInfo, read_gguf
from gateway.modelstore.gguf.tokenizer import build_tokenizer, stop_token_ids

ProgressCallback = Callable[[str], None]
_EXACT_TYPES = frozenset({"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K"})


def _dequantize(header: GGUFFile, tensor: TensorInfo) -> np.ndarray:
    """gguf-py's float32 values of a tensor (the reference every repacking is judged by)."""
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize

    raw = np.asarray(header.raw(tensor))
    kind = tensor.type_name
    if kind == "BF16":
        return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    if kind == "F64":
        return raw.view(np.float64).astype(np.float32)
    return np.asarray(dequantize(raw, GGMLQuantizationType[kind]), dtype=np.float32)


def _float_array(header: GGUFFile, tensor: TensorInfo) -> Any:
    """A float tensor in its own width (F16 stays float16, BF16 bfloat16)."""
    raw = np.asarray(header.raw(tensor))
    return float_tensor(raw, tensor.type_name, lambda: _dequantize(header, tensor))


def _quantized(header: GGUFFile, tensor: TensorInfo) -> Affine:
    kind = tensor.type_name
    if kind in _EXACT_TYPES:
        return repack(kind, header.raw(tensor))
    if kind == "Q6_K":
        return requantize_8bit_q6_k(header.raw(tensor), _dequantize(header, tensor))
    return requantize(_dequantize(header, tensor), mlx_bits(kind))


def _float_width(header: GGUFFile) -> str:
    """The dtype every float tensor is stored in: one width per model, as mlx-lm expects.

    A quantized model's float tensors become float32: a float16 embedding (llama.cpp's K-quant
    mixes keep some rows in F16) would turn the activations float16, which costs quality
    (MODELS.md section 2) and runs slowly on a CPU. A float16/bfloat16 model keeps its width,
    its F32 norms and router included (llama.cpp widened them from that width).
    """
    kinds = {t.type_name for t in header.tensors}
    if kinds - FLOAT_TYPES:
        return "float32"
    sizes: dict[str, int] = {}
    for tensor in header.tensors:
        sizes[tensor.type_name] = sizes.get(tensor.type_name, 0) + tensor.elements
    dominant = max(sizes, key=lambda kind: sizes[kind])
    return {"F16": "float16", "BF16": "bfloat16"}.get(dominant, "float32")


class _Record:
    """The import record: per ggml type, what became of its tensors."""

    def __init__(self) -> None:
        self.types: dict[str, dict[str, Any]] = {}

    def add(self, name: str, kind: str, outcome: str, bits: int | None, **extra: Any) -> None:
        entry = self.types.setdefault(
            kind, {"tensors": 0, "outcome": outcome, "mlx_bits": bits, "requantized": {}}
        )
        entry["tensors"] += 1
        if outcome == "requantized":
            entry["outcome"] = "requantized"
            entry["requantized"][name] = extra
            worst = max(v["max_abs_error"] for v in entry["requantized"].values())
            entry["max_abs_error"] = worst


def _convert_weights(
    header: GGUFFile, arch: Architecture, progress: ProgressCallback
) -> tuple[dict[str, Any], dict[str, Any], _Record]:
    record = _Record()
    weights: dict[str, Any] = {}
    per_layer: dict[str, Any] = {}  # module -> its quantization where it differs
    bit_counts: dict[int, int] = {}
    float_width = _float_width(header)
    for index, tensor in enumerate(header.tensors):
        name = arch.mlx_name(tensor.name)
        if name is None:
            continue
        if index % 64 == 0:
            progress(f"converting tensors {index}/{len(header.tensors)}")
        kind = tensor.type_name
        if kind in FLOAT_TYPES:
            array = _float_array(header, tensor)
            if arch.norm_offset and arch.is_norm(tensor.name):
                array = minus(array, arch.norm_offset)
            array = in_width(array, float_width)
            weights[name] = array
            record.add(tensor.name, kind, "kept", None)
            continue
        affine = _quantized(header, tensor)
        stem = name.removesuffix(".weight")
        weights[name] = from_numpy(affine.weight)
        weights[f"{stem}.scales"] = from_numpy(affine.scales)
        weights[f"{stem}.biases"] = from_numpy(affine.biases)
        bit_counts[affine.bits] = bit_counts.get(affine.bits, 0) + 1
        per_layer[stem] = {"group_size": GROUP_SIZE, "bits": affine.bits, "mode": "affine"}
        if affine.exact:
            record.add(tensor.name, kind, "repacked exactly", affine.bits)
        else:
            record.add(
                tensor.name,
                kind,
                "requantized",
                affine.bits,
                max_abs_error=affine.max_abs_error,
                exact_groups=round(affine.exact_groups, 4),
            )
    quantization: dict[str, Any] = {}
    if bit_counts:
        default = max(bit_counts, key=lambda b: bit_counts[b])
        quantization = {"group_size": GROUP_SIZE, "bits": default, "mode": "affine"}
        quantization.update({k: v for k, v in per_layer.items() if v["bits"] != default})
    return weights, quantization, record


def convert_gguf(
    gguf_path: Path,
    out_dir: Path,
    progress: ProgressCallback,
    chat_template: str | None = None,
) -> dict[str, Any]:
    """Write the mlx-lm folder for ``gguf_path`` into ``out_dir`` and return the import record.

    ``chat_template`` replaces the file's own (the embedded Gemma base model's transcript).
    """
    progress(f"reading {Path(gguf_path).name}")
    header = read_gguf(Path(gguf_path))
    meta = header.metadata
    gguf_arch = str(meta.get("general.architecture"))
    arch = SUPPORTED_ARCHITECTURES.get(gguf_arch)
    if arch is None:
        raise ValueError(
            f"{Path(gguf_path).name}: GGUF architecture {gguf_arch!r} is not supported "
            f"(supported: {', '.join(SUPPORTED_ARCHITECTURES)})"
        )
    weights, quantization, record = _convert_weights(header, arch, progress)
    names = {t.name for t in header.tensors}
    config = arch.config(meta, names)
    config.setdefault("vocab_size", len(meta["tokenizer.ggml.tokens"]))
    bos = meta.get("tokenizer.ggml.bos_token_id")
    if bos is not None:
        config["bos_token_id"] = int(bos)
    stops = stop_token_ids(meta)
    if stops:
        config["eos_token_id"] = stops[0] if len(stops) == 1 else stops
    if quantization:
        config["quantization"] = quantization
    if "rope_freqs.weight" in names:
        config["rope_scaling"] = _llama3_rope_scaling(header, config)
    progress("writing weights")
    out_dir.mkdir(parents=True, exist_ok=True)
    save_weights(out_dir / "model.safetensors", weights)
    (out_dir / "config.json").write_text(json.dumps(config, indent=2))
    progress("building tokenizer")
    build_tokenizer(meta, chat_template).save_pretrained(str(out_dir))
    return {
        "architecture": gguf_arch,
        "model_type": arch.model_type,
        "tensors": len(header.tensors),
        "types": record.types,
        "chat_template": "override"
        if chat_template is not None
        else ("gguf" if meta.get("tokenizer.chat_template") else "none"),
    }


def _llama3_rope_scaling(header: GGUFFile, config: dict[str, Any]) -> dict[str, Any]:
    """Llama 3.1+'s RoPE scaling, recovered from llama.cpp's stored frequency factors.

    The converter writes the factors (``rope_freqs``), not the parameters that made them; the
    parameters Meta ships (low 1, high 4, original context 8192) are checked against them.
    """
    tensor = next(t for t in header.tensors if t.name == "rope_freqs.weight")
    factors = _dequantize(header, tensor).reshape(-1)
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    base = config["rope_theta"]
    scaling = {
        "rope_type": "llama3",
        "factor": float(factors.max()),
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    }
    expected = _llama3_factors(head_dim, base, scaling)
    if not np.allclose(expected, factors, rtol=1e-3):
        raise ValueError("rope_freqs does not match Llama 3's RoPE scaling: not supported")
    return scaling


def _llama3_factors(head_dim: int, base: float, s: dict[str, Any]) -> np.ndarray:
    """The per-dimension divisors llama.cpp's converter computes for Llama 3 scaling."""
    freqs = 1.0 / base ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    old = s["original_max_position_embeddings"]
    low_wavelen = old / s["low_freq_factor"]
    high_wavelen = old / s["high_freq_factor"]
    out = []
    for freq in freqs:
        wavelen = 2 * np.pi / freq
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(s["factor"])
        else:
            smooth = (old / wavelen - s["low_freq_factor"]) / (
                s["high_freq_factor"] - s["low_freq_factor"]
            )
            out.append(1.0 / ((1 - smooth) / s["factor"] + smooth))
    return np.array(out, dtype=np.float32)
