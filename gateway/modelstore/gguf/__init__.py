"""The GGUF importer: llama.cpp's files as mlx-lm model folders.

- ``read_summary(path)``: what a file is, from its header alone (the catalog's view).
- ``estimate_loaded_bytes(summary_or_path, dequantized)``: memory its imported weights take.
- ``convert_gguf(gguf_path, out_dir, progress)``: write the mlx-lm folder, return the import
  record (per ggml type: repacked bit-exactly, kept, or re-quantized with the largest error).

Modules, one job each: ``reader`` (the file format), ``header`` (summaries), ``architectures``
(tensor names and config per architecture), ``quants`` (ggml blocks as MLX affine),
``tokenizer`` (the tokenizer from metadata), ``convert`` (the folder).
"""

from __future__ import annotations

from gateway.modelstore.gguf.convert import ProgressCallback, convert_gguf
from gateway.modelstore.gguf.header import GGUFSummary, estimate_loaded_bytes, read_summary

__all__ = [
    "GGUFSummary",
    "ProgressCallback",
    "convert_gguf",
    "estimate_loaded_bytes",
    "read_summary",
]
