"""A safetensors file written piece by piece: the import's memory is one slice, not the model.

safetensors is a JSON header (every tensor's dtype, shape and byte range) followed by the data.
Every output tensor's shape and dtype follow from the GGUF header alone (a quantized tensor's
MLX width is fixed by its ggml type), so the whole header is written first and each tensor's
rows are then written at their place (``os.pwrite``) as they are converted, a slice at a time.
Before this the importer held every converted tensor and handed the dict to MLX: 6.0 GB peak
for a 491 MB GGUF (issue 31). mlx-lm reads the file as MLX wrote it (``format: mlx``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

_DTYPES: dict[str, tuple[str, np.dtype[Any]]] = {
    "float32": ("F32", np.dtype("<f4")),
    "float16": ("F16", np.dtype("<f2")),
    "bfloat16": ("BF16", np.dtype("<u2")),  # numpy has no bfloat16: its bits as uint16
    "uint32": ("U32", np.dtype("<u4")),
}


@dataclass(frozen=True)
class Planned:
    """One output tensor: its name, dtype (``float32``, ``float16``, ``bfloat16``, ``uint32``)
    and shape."""

    name: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def row_bytes(self) -> int:
        columns = self.shape[-1] if self.shape else 1
        return columns * _DTYPES[self.dtype][1].itemsize

    @property
    def nbytes(self) -> int:
        count = 1
        for dim in self.shape:
            count *= dim
        return count * _DTYPES[self.dtype][1].itemsize


class SafetensorsWriter:
    """Write ``plan``'s tensors into ``path``: ``write(name, rows, start_row)`` any order."""

    def __init__(self, path: Path, plan: list[Planned], metadata: dict[str, str]) -> None:
        self.plan = {p.name: p for p in plan}
        if len(self.plan) != len(plan):
            raise ValueError("two output tensors of one name")
        header: dict[str, object] = {"__metadata__": metadata}
        self.offsets: dict[str, int] = {}
        offset = 0
        for p in sorted(plan, key=lambda p: p.name):  # MLX writes them sorted too
            header[p.name] = {
                "dtype": _DTYPES[p.dtype][0],
                "shape": list(p.shape),
                "data_offsets": [offset, offset + p.nbytes],
            }
            self.offsets[p.name] = offset
            offset += p.nbytes
        text = json.dumps(header, separators=(",", ":")).encode()
        text += b" " * (-len(text) % 8)  # the data 8-byte aligned, as the format advises
        self.data_start = 8 + len(text)
        self.written = dict.fromkeys(self.plan, 0)
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.pwrite(self.fd, len(text).to_bytes(8, "little") + text, 0)
        os.ftruncate(self.fd, self.data_start + offset)

    def write(self, name: str, rows: np.ndarray, start_row: int = 0) -> None:
        """Rows ``start_row…`` of tensor ``name`` (leading dimensions flattened into rows)."""
        planned = self.plan[name]
        data = np.ascontiguousarray(rows, dtype=_DTYPES[planned.dtype][1])
        if data.nbytes % planned.row_bytes:
            raise ValueError(f"{name}: {data.shape} is not whole rows of {planned.shape}")
        position = start_row * planned.row_bytes
        if position + data.nbytes > planned.nbytes:
            raise ValueError(f"{name}: rows past the end of {planned.shape}")
        view = data.reshape(-1).view(np.uint8).data
        at = self.data_start + self.offsets[name] + position
        while view:
            done = os.pwrite(self.fd, view, at)
            view, at = view[done:], at + done
        self.written[name] += data.nbytes

    def close(self) -> None:
        os.close(self.fd)
        short = [n for n, p in self.plan.items() if self.written[n] != p.nbytes]
        if short:
            raise ValueError(f"tensors not written whole: {', '.join(sorted(short)[:5])}")

    def __enter__(self) -> SafetensorsWriter:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if kind is None:
            self.close()
        else:
            os.close(self.fd)


def to_width(values: np.ndarray, width: str) -> np.ndarray:
    """Float values in ``width``; bfloat16 as its bits (uint16), rounded to nearest even as
    MLX's cast rounds."""
    if width == "bfloat16":
        if values.dtype == np.uint16:  # already bfloat16 bits
            return values
        bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
        rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> 16
        return rounded.astype(np.uint16)
    dtype: np.dtype[Any] = _DTYPES[width][1]
    return np.asarray(values, dtype=dtype)
