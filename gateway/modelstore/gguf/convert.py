"""Turn a GGUF file into an mlx-lm model folder, and say exactly what happened to each tensor.

The folder holds config.json, model.safetensors (MLX affine quantization with float32 scales
and biases where the GGUF is quantized, the GGUF's float width otherwise; written a slice of
rows at a time, ``writer.py``) and the tokenizer files with the GGUF's chat template. The returned import record lists, per ggml type, how
many tensors were repacked bit-exactly and which were re-quantized, with the largest error
against gguf-py's own dequantization.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from gateway.modelstore.gguf.architectures import SUPPORTED_ARCHITECTURES, Architecture
from gateway.modelstore.gguf.quants import (
    FLOAT_TYPES,
    GROUP_SIZE,
    IMPORTABLE_TYPES,
    Affine,
    mlx_bits,
    repack,
    requantize,
    requantize_8bit_q6_k,
)
from gateway.modelstore.gguf.reader import GGUFFile, TensorInfo, read_gguf
from gateway.modelstore.gguf.tokenizer import build_tokenizer, stop_token_ids
from gateway.modelstore.gguf.writer import Planned, SafetensorsWriter, to_width

ProgressCallback = Callable[[str], None]
_EXACT_TYPES = frozenset({"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K"})
# Values converted at a time: a slice of ~16 MB as float32, a few such arrays in flight.
_SLICE_VALUES = 1 << 22


def _dequantize_rows(tensor: TensorInfo, raw: np.ndarray) -> np.ndarray:
    """gguf-py's float32 values of some rows of a tensor (the reference every repacking is
    judged by); ``raw`` is their bytes, (rows, bytes per row)."""
    kind = tensor.type_name
    if kind == "F32":
        return raw.view(np.float32)
    if kind == "F16":
        return raw.view(np.float16).astype(np.float32)
    if kind == "BF16":
        return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    if kind == "F64":
        return raw.view(np.float64).astype(np.float32)
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize

    return np.asarray(dequantize(raw, GGMLQuantizationType[kind]), dtype=np.float32)


def _dequantize(header: GGUFFile, tensor: TensorInfo) -> np.ndarray:
    """A whole (small) tensor's float32 values."""
    raw = header.read_rows(tensor, 0, header.rows(tensor))
    return _dequantize_rows(tensor, raw).reshape(tensor.shape)


def _quantized(kind: str, raw: np.ndarray, values: Callable[[], np.ndarray]) -> Affine:
    """Rows of a quantized tensor in MLX affine form; ``values()`` their float32 values."""
    if kind in _EXACT_TYPES:
        return repack(kind, raw)
    if kind == "Q6_K":
        return requantize_8bit_q6_k(raw, values())
    return requantize(values(), mlx_bits(kind))


def _float_rows(tensor: TensorInfo, raw: np.ndarray, width: str, offset: float) -> np.ndarray:
    """Rows of a float tensor in ``width``: F16 in a float16 model and BF16 in a bfloat16 one
    keep their bits; a norm stored as 1 + w (Gemma) loses the 1 in float32 first."""
    kind = tensor.type_name
    if offset:
        return to_width(_dequantize_rows(tensor, raw) - np.float32(offset), width)
    if kind == "BF16" and width == "bfloat16":
        return raw.view(np.uint16)
    if kind == "F16" and width == "float16":
        return raw.view(np.float16)
    return to_width(_dequantize_rows(tensor, raw), width)


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


def _plan(
    header: GGUFFile, arch: Architecture, float_width: str
) -> list[tuple[TensorInfo, str, list[Planned]]]:
    """Every output tensor, from the header alone: (GGUF tensor, its mlx-lm name, outputs)."""
    out: list[tuple[TensorInfo, str, list[Planned]]] = []
    for tensor in header.tensors:
        name = arch.mlx_name(tensor.name)
        if name is None:
            continue
        kind = tensor.type_name
        if kind in FLOAT_TYPES:
            out.append((tensor, name, [Planned(name, float_width, tensor.shape)]))
            continue
        if kind not in IMPORTABLE_TYPES:
            raise ValueError(
                f"tensor {tensor.name} is {kind}, which is not imported "
                f"(importable: {', '.join(sorted(IMPORTABLE_TYPES))})"
            )
        lead, columns = tensor.shape[:-1], tensor.shape[-1]
        bits, stem = mlx_bits(kind), name.removesuffix(".weight")
        out.append(
            (
                tensor,
                name,
                [
                    Planned(name, "uint32", (*lead, columns * bits // 32)),
                    Planned(f"{stem}.scales", "float32", (*lead, columns // GROUP_SIZE)),
                    Planned(f"{stem}.biases", "float32", (*lead, columns // GROUP_SIZE)),
                ],
            )
        )
    return out


def _write_weights(
    header: GGUFFile, arch: Architecture, path: Path, progress: ProgressCallback
) -> tuple[dict[str, Any], _Record]:
    """Convert every tensor into ``path``, a slice of rows at a time (``SafetensorsWriter``):
    the import's peak memory is a slice's, whatever the model's size."""
    record = _Record()
    per_layer: dict[str, Any] = {}  # module -> its quantization where it differs
    bit_counts: dict[int, int] = {}
    float_width = _float_width(header)
    plan = _plan(header, arch, float_width)
    with SafetensorsWriter(
        path, [p for _, _, outputs in plan for p in outputs], {"format": "mlx"}
    ) as writer:
        for index, (tensor, name, outputs) in enumerate(plan):
            if index % 64 == 0:
                progress(f"converting tensors {index}/{len(plan)}")
            kind = tensor.type_name
            rows, columns = header.rows(tensor), tensor.shape[-1] if tensor.shape else 1
            step = max(1, _SLICE_VALUES // max(columns, 1))
            offset = arch.norm_offset if arch.norm_offset and arch.is_norm(tensor.name) else 0.0
            exact, exact_groups, worst = True, 0.0, 0.0
            for start in range(0, rows, step):
                stop = min(rows, start + step)
                raw = header.read_rows(tensor, start, stop)
                if kind in FLOAT_TYPES:
                    values = _float_rows(tensor, raw, float_width, offset)
                    writer.write(name, values, start)
                    continue
                affine = _quantized(kind, raw, partial(_dequantize_rows, tensor, raw))
                for planned, part in zip(
                    outputs, (affine.weight, affine.scales, affine.biases), strict=True
                ):
                    writer.write(planned.name, part, start)
                exact = exact and affine.exact
                exact_groups += affine.exact_groups * (stop - start)
                worst = max(worst, affine.max_abs_error)
            if kind in FLOAT_TYPES:
                record.add(tensor.name, kind, "kept", None)
                continue
            bits, stem = mlx_bits(kind), name.removesuffix(".weight")
            bit_counts[bits] = bit_counts.get(bits, 0) + 1
            per_layer[stem] = {"group_size": GROUP_SIZE, "bits": bits, "mode": "affine"}
            if exact:
                record.add(tensor.name, kind, "repacked exactly", bits)
            else:
                record.add(
                    tensor.name,
                    kind,
                    "requantized",
                    bits,
                    max_abs_error=worst,
                    exact_groups=round(exact_groups / max(rows, 1), 4),
                )
    quantization: dict[str, Any] = {}
    if bit_counts:
        default = max(bit_counts, key=lambda b: bit_counts[b])
        quantization = {"group_size": GROUP_SIZE, "bits": default, "mode": "affine"}
        quantization.update({k: v for k, v in per_layer.items() if v["bits"] != default})
    return quantization, record


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
    out_dir.mkdir(parents=True, exist_ok=True)
    quantization, record = _write_weights(header, arch, out_dir / "model.safetensors", progress)
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
