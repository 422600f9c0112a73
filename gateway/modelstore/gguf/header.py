"""What a GGUF file is, from its header alone: for the catalog, which lists many files at once.

A summary never builds arrays of tensors or decodes a vocabulary (see ``reader``); repeated
calls on an unchanged file (same size and modification time) are answered from memory.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from gateway.modelstore.gguf.architectures import SUPPORTED_ARCHITECTURES
from gateway.modelstore.gguf.quants import IMPORTABLE_TYPES, mlx_bits
from gateway.modelstore.gguf.reader import read_gguf

# MLX affine quantization stores, per group of 32 values, one float32 scale and one float32
# bias (MODELS.md section 2: float16 scales cost quality): 8 bytes.
_GROUP = 32
_SCALE_BIAS_BYTES = 8
# Float tensors keep their width; F64 (rare) is imported as float32.
_FLOAT_BYTES = {"F32": 4, "F16": 2, "BF16": 2, "F64": 4}
# ``general.file_type``: llama.cpp's ``llama_ftype`` (llama.h; gguf-py's ``LlamaFileType``),
# named as quantized files are (``Q4_K_M``). The type a file was quantized *as*: a Q4_K_M file
# keeps some tensors in Q6_K or Q5_0, so its commonest tensor type need not be its name.
# 4-6 were removed from llama.cpp; 1024 (GUESSED) is never written to a file.
FILE_TYPES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K",
    11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S",
    17: "Q5_K_M", 18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS",
    23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S",
    29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16", 36: "TQ1_0", 37: "TQ2_0",
    38: "MXFP4_MOE", 39: "NVFP4", 40: "Q1_0",
}  # fmt: skip


@dataclass(frozen=True)
class GGUFSummary:
    """A GGUF file as the catalog shows it."""

    # mlx-lm's model_type for the architecture (``qwen3_moe``), or the GGUF's own name
    # (``general.architecture``) when the importer does not support it.
    architecture: str
    supported: bool  # the architecture and every tensor type can be imported
    parameters: int  # elements of all tensors
    quant_types: dict[str, int]  # ggml type name -> number of tensors
    context_length: int | None
    file_bytes: int
    has_chat_template: bool
    name: str | None  # general.name
    # ggml type name -> elements stored in it (what the memory estimate needs).
    elements_by_type: dict[str, int]
    # The file's type from ``general.file_type`` (``Q4_K_M``); None when absent or unknown.
    file_type: str | None = None


def read_summary(path: Path) -> GGUFSummary:
    """Summarize ``path`` from its header (about 20 ms for a 50k-token vocabulary)."""
    stat = os.stat(path)
    return _summary(str(Path(path).resolve()), stat.st_size, stat.st_mtime_ns)


@lru_cache(maxsize=512)
def _summary(path: str, size: int, mtime_ns: int) -> GGUFSummary:
    header = read_gguf(Path(path), values=False)
    meta = header.metadata
    gguf_arch = str(meta.get("general.architecture", "unknown"))
    spec = SUPPORTED_ARCHITECTURES.get(gguf_arch)
    counts: dict[str, int] = {}
    elements: dict[str, int] = {}
    for tensor in header.tensors:
        kind = tensor.type_name
        counts[kind] = counts.get(kind, 0) + 1
        elements[kind] = elements.get(kind, 0) + tensor.elements
    context = meta.get(f"{gguf_arch}.context_length")
    name = meta.get("general.name")
    file_type = meta.get("general.file_type")
    return GGUFSummary(
        architecture=spec.model_type if spec else gguf_arch,
        supported=spec is not None and all(kind in IMPORTABLE_TYPES for kind in counts),
        parameters=sum(elements.values()),
        quant_types=dict(sorted(counts.items())),
        context_length=int(context) if context is not None else None,
        file_bytes=header.file_bytes,
        has_chat_template=bool(meta.get("tokenizer.chat_template")),
        name=str(name) if name is not None else None,
        elements_by_type=dict(sorted(elements.items())),
        file_type=FILE_TYPES.get(file_type) if isinstance(file_type, int) else None,
    )


def estimate_loaded_bytes(summary_or_path: GGUFSummary | Path | str, dequantized: bool) -> int:
    """Bytes the imported weights take in memory.

    ``dequantized``: every weight as float32 (the Linux fast path when it fits). Otherwise
    as imported: quantized tensors become MLX affine at the width the importer chooses (4, 5
    or 8 bits) plus a float32 scale and bias per 32 values, and the float tensors float32; a
    float model keeps its own width (``convert._float_width`` decides the same way).
    """
    summary = (
        summary_or_path
        if isinstance(summary_or_path, GGUFSummary)
        else read_summary(Path(summary_or_path))
    )
    by_type = summary.elements_by_type
    if dequantized:
        return 4 * sum(by_type.values())
    floats = {kind: count for kind, count in by_type.items() if kind in _FLOAT_BYTES}
    if len(floats) == len(by_type):  # a float model keeps its dominant width throughout
        dominant = max(floats, key=lambda kind: floats[kind])
        return _FLOAT_BYTES[dominant] * sum(floats.values())
    total = 4 * sum(floats.values())  # a quantized model's float tensors become float32
    for kind, count in by_type.items():
        if kind not in floats:
            total += count * mlx_bits(kind) // 8 + count // _GROUP * _SCALE_BIAS_BYTES
    return total
