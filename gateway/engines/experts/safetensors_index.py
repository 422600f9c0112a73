"""Where each tensor's bytes are in a model folder's safetensors files, from the headers.

A safetensors file is a little-endian u64 header length, a JSON header (per tensor: dtype,
shape, ``data_offsets`` relative to the end of the header), then the data. A stacked expert
tensor ``[E, ...]`` is row-major, so expert ``e`` is the contiguous range
``start + e * (nbytes / E)``: one ``pread`` per expert and tensor, nothing else read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from gateway.engines.footprint import DTYPE_BYTES, read_safetensors_header


@dataclass(frozen=True)
class TensorLocation:
    """One tensor in one file: ``offset`` is absolute (header included)."""

    file: Path
    dtype: str  # safetensors' name: F16, BF16, F32, U32, ...
    shape: tuple[int, ...]
    offset: int
    nbytes: int

    def row_bytes(self) -> int:
        """Bytes of one slice along the first axis (one expert of a stacked tensor)."""
        return self.nbytes // self.shape[0]

    def row_offset(self, row: int) -> int:
        return self.offset + row * self.row_bytes()


def index_folder(folder: Path) -> dict[str, TensorLocation]:
    """Every tensor of the folder's ``*.safetensors`` files, by name."""
    index: dict[str, TensorLocation] = {}
    for file in sorted(folder.glob("*.safetensors")):
        index.update(index_file(file))
    return index


def index_file(file: Path) -> dict[str, TensorLocation]:
    data_start, header = read_safetensors_header(file)
    index: dict[str, TensorLocation] = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        shape = tuple(int(d) for d in info["shape"])
        expected = math.prod(shape) * DTYPE_BYTES.get(info["dtype"], 0)
        if expected and expected != end - begin:
            raise ValueError(f"{file.name}: {name} spans {end - begin} bytes, not {expected}")
        index[name] = TensorLocation(file, info["dtype"], shape, data_start + begin, end - begin)
    return index
