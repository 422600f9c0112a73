"""Read a GGUF file's header: its metadata and where each tensor lies.

gguf-py's ``GGUFReader`` builds a numpy view of every metadata element: 3 s for SmolLM2's file
and 10 s for Gemma's 262k-token vocabulary, before a single tensor is touched. The catalog asks
for the headers of 50 files in under a second, and the importer only needs plain Python values,
so this module parses the format itself (it is small: a key/value list, then tensor records):

    magic "GGUF", version u32, tensor count u64, key/value count u64,
    key/value: key string, value type u32, value   (string = u64 length + UTF-8 bytes;
                                                     array = element type u32, count u64, elements)
    tensor:    name string, n_dims u32, dims u64 x n_dims (innermost first), type u32, offset u64
    data:      from the header's end rounded up to ``general.alignment`` (default 32)

With ``values=False`` arrays of strings (vocabularies, merges) are skipped, not decoded: only
their lengths are kept. Numeric arrays come back as numpy arrays (one ``frombuffer`` each).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gateway.errors import ModelImportError

# ggml's type ids with (name, elements per block, bytes per block). These are the on-disk
# format (ids never change); kept here so that reading a header does not import gguf-py
# (~0.1 s), whose GGML_QUANT_SIZES holds the same numbers.
GGML_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4),
    1: ("F16", 1, 2),
    2: ("Q4_0", 32, 18),
    3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24),
    8: ("Q8_0", 32, 34),
    9: ("Q8_1", 32, 40),
    10: ("Q2_K", 256, 84),
    11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176),
    14: ("Q6_K", 256, 210),
    15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66),
    17: ("IQ2_XS", 256, 74),
    18: ("IQ3_XXS", 256, 98),
    19: ("IQ1_S", 256, 50),
    20: ("IQ4_NL", 32, 18),
    21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82),
    23: ("IQ4_XS", 256, 136),
    24: ("I8", 1, 1),
    25: ("I16", 1, 2),
    26: ("I32", 1, 4),
    27: ("I64", 1, 8),
    28: ("F64", 1, 8),
    29: ("IQ1_M", 256, 56),
    30: ("BF16", 1, 2),
    34: ("TQ1_0", 256, 54),
    35: ("TQ2_0", 256, 66),
    39: ("MXFP4", 32, 17),
}

# Metadata value types: id -> numpy dtype for the fixed-size ones.
_STRING, _ARRAY = 8, 9
_SCALARS: dict[int, np.dtype[Any]] = {
    0: np.dtype("<u1"),
    1: np.dtype("<i1"),
    2: np.dtype("<u2"),
    3: np.dtype("<i2"),
    4: np.dtype("<u4"),
    5: np.dtype("<i4"),
    6: np.dtype("<f4"),
    7: np.dtype("?"),
    10: np.dtype("<u8"),
    11: np.dtype("<i8"),
    12: np.dtype("<f8"),
}
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
# Headers are read in chunks of this size; a vocabulary of 150k tokens plus its merges is
# a few MB, so most headers take one or two reads.
_CHUNK = 1 << 22


class GGUFFormatError(ModelImportError, ValueError):
    """The file is not a GGUF file this reader understands (a ``ValueError`` to the
    importer's callers; to the CLI and the server, a model import error that says why)."""


@dataclass(frozen=True)
class TensorInfo:
    """Where one tensor lies in the file, and what it is."""

    name: str
    type_id: int
    # numpy order (outermost first), as gguf-py reports it: (rows, columns) for a matrix,
    # (experts, rows, columns) for a stacked MoE projection.
    shape: tuple[int, ...]
    offset: int  # absolute byte offset in the file
    nbytes: int

    @property
    def type_name(self) -> str:
        return GGML_TYPES.get(self.type_id, (f"TYPE{self.type_id}", 1, 1))[0]

    @property
    def elements(self) -> int:
        count = 1
        for dim in self.shape:
            count *= dim
        return count


@dataclass
class GGUFFile:
    """A parsed header. ``metadata`` holds plain values (str, int, float, bool, list, ndarray)."""

    path: Path
    version: int
    metadata: dict[str, Any]
    tensors: list[TensorInfo]
    data_offset: int
    file_bytes: int
    # Lengths of the string arrays that were skipped (``values=False``).
    array_lengths: dict[str, int] = field(default_factory=dict)

    def raw(self, tensor: TensorInfo) -> np.ndarray:
        """The tensor's bytes as a read-only uint8 memory map shaped (…rows, bytes per row)."""
        row_bytes = _row_bytes(tensor.type_id, tensor.shape[-1])
        mapped = np.memmap(
            self.path, dtype=np.uint8, mode="r", offset=tensor.offset, shape=(tensor.nbytes,)
        )
        return mapped.reshape(*tensor.shape[:-1], row_bytes)

    def rows(self, tensor: TensorInfo) -> int:
        """The tensor's rows, its leading dimensions flattened (1 for a vector)."""
        count = 1
        for dim in tensor.shape[:-1]:
            count *= dim
        return count

    def read_rows(self, tensor: TensorInfo, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` of the tensor's bytes, read (not mapped: a mapping's pages
        count in the process's memory until it is closed), shaped (rows, bytes per row)."""
        row_bytes = _row_bytes(tensor.type_id, tensor.shape[-1])
        size = (stop - start) * row_bytes
        data = bytearray(size)
        with self.path.open("rb", buffering=0) as handle:
            handle.seek(tensor.offset + start * row_bytes)
            view = memoryview(data)
            while view:
                done = handle.readinto(view)
                if not done:
                    raise GGUFFormatError(f"{self.path.name}: file ends inside {tensor.name}")
                view = view[done:]
        return np.frombuffer(data, np.uint8).reshape(stop - start, row_bytes)


def _row_bytes(type_id: int, columns: int) -> int:
    _name, block, size = GGML_TYPES.get(type_id, ("", 1, 1))
    if columns % block:
        raise GGUFFormatError(f"row of {columns} values is not a whole number of blocks")
    return columns // block * size


class _Cursor:
    """Sequential reads over a file, buffered in large chunks."""

    def __init__(self, handle: Any, size: int) -> None:
        self.handle = handle
        self.size = size  # the file's: no read may claim more
        self.buffer = b""
        self.start = 0  # file offset of buffer[0]
        self.pos = 0  # position inside buffer

    def ensure(self, size: int) -> None:
        if self.pos + size <= len(self.buffer):
            return
        if self.start + self.pos + size > self.size:
            # A length in a crafted header (a string, an array) may claim exabytes: refused
            # before anything that large is asked of the disk or of memory.
            raise GGUFFormatError(
                f"the header claims {size:,} bytes at offset {self.start + self.pos:,}, past "
                f"the file's end ({self.size:,} bytes)"
            )
        self.start += self.pos
        self.handle.seek(self.start)
        self.buffer = self.handle.read(max(size, _CHUNK))
        self.pos = 0
        if len(self.buffer) < size:
            raise GGUFFormatError("file ends inside its header")

    def u32(self) -> int:
        self.ensure(4)
        value: int = _U32.unpack_from(self.buffer, self.pos)[0]
        self.pos += 4
        return value

    def u64(self) -> int:
        self.ensure(8)
        value: int = _U64.unpack_from(self.buffer, self.pos)[0]
        self.pos += 8
        return value

    def take(self, size: int) -> bytes:
        self.ensure(size)
        chunk = self.buffer[self.pos : self.pos + size]
        self.pos += size
        return chunk

    def string(self) -> str:
        return self.take(self.u64()).decode("utf-8", errors="replace")

    def strings(self, count: int, decode: bool) -> list[str] | None:
        """``count`` strings, or None after skipping them (one unpack per string)."""
        out: list[str] | None = [] if decode else None
        unpack = _U64.unpack_from
        done = 0
        while done < count:
            # Walk the buffered part in a tight loop; refill when a string crosses its end.
            buffer, pos, end = self.buffer, self.pos, len(self.buffer)
            while done < count and pos + 8 <= end:
                length: int = unpack(buffer, pos)[0]
                if pos + 8 + length > end:
                    break
                if out is not None:
                    out.append(buffer[pos + 8 : pos + 8 + length].decode("utf-8", "replace"))
                pos += 8 + length
                done += 1
            self.pos = pos
            if done < count:
                self.ensure(8)
                self.ensure(8 + _U64.unpack_from(self.buffer, self.pos)[0])
        return out

    @property
    def offset(self) -> int:
        return self.start + self.pos


def _value(cursor: _Cursor, kind: int, key: str, values: bool, lengths: dict[str, int]) -> Any:
    if kind == _STRING:
        return cursor.string()
    if kind in _SCALARS:
        dtype = _SCALARS[kind]
        return np.frombuffer(cursor.take(dtype.itemsize), dtype)[0].item()
    if kind != _ARRAY:
        raise GGUFFormatError(f"{key}: unknown metadata type {kind}")
    element, count = cursor.u32(), cursor.u64()
    if element == _STRING:
        # Short lists (tags, languages) are kept even in a summary; vocabularies are not.
        decoded = cursor.strings(count, decode=values or count <= 64)
        if decoded is None:
            lengths[key] = count
        return decoded
    if element in _SCALARS:
        dtype = _SCALARS[element]
        return np.frombuffer(cursor.take(dtype.itemsize * count), dtype).copy()
    if element == _ARRAY:  # arrays of arrays: rare, never needed here; decode generically
        return [_value(cursor, _ARRAY, key, values, lengths) for _ in range(count)]
    raise GGUFFormatError(f"{key}: unknown array element type {element}")


def read_gguf(path: Path, values: bool = True) -> GGUFFile:
    """Parse ``path``'s header; ``values=False`` skips string arrays (for quick summaries)."""
    path = Path(path)
    file_bytes = path.stat().st_size
    with path.open("rb") as handle:
        cursor = _Cursor(handle, file_bytes)
        if cursor.take(4) != b"GGUF":
            raise GGUFFormatError(f"{path.name}: not a GGUF file")
        version = cursor.u32()
        if version not in (2, 3):
            raise GGUFFormatError(f"{path.name}: GGUF version {version} is not supported")
        tensor_count, kv_count = cursor.u64(), cursor.u64()
        metadata: dict[str, Any] = {}
        lengths: dict[str, int] = {}
        for _ in range(kv_count):
            key = cursor.string()
            metadata[key] = _value(cursor, cursor.u32(), key, values, lengths)
        records = []
        for _ in range(tensor_count):
            name = cursor.string()
            n_dims = cursor.u32()
            if n_dims > MAX_DIMS:
                raise GGUFFormatError(f"tensor {name[:80]!r} has {n_dims} dimensions (at most 4)")
            dims = [cursor.u64() for _ in range(n_dims)]
            records.append((name, tuple(reversed(dims)), cursor.u32(), cursor.u64()))
        alignment = metadata.get("general.alignment", 32)
        if not isinstance(alignment, int) or not 0 < alignment <= 1 << 20:
            raise GGUFFormatError(f"general.alignment {alignment!r} is not a sane alignment")
        data_offset = -(-cursor.offset // alignment) * alignment
    tensors = [_tensor(record, data_offset) for record in records]
    _check_layout(tensors, file_bytes)
    return GGUFFile(path, version, metadata, tensors, data_offset, file_bytes, lengths)


# GGML's own bound (GGML_MAX_DIMS).
MAX_DIMS = 4


def _tensor(record: tuple[str, tuple[int, ...], int, int], data_offset: int) -> TensorInfo:
    name, shape, type_id, offset = record
    if type_id not in GGML_TYPES:
        raise GGUFFormatError(f"tensor {name!r} has an unknown type ({type_id})")
    if any(dim == 0 for dim in shape):
        raise GGUFFormatError(f"tensor {name!r} has an empty dimension {shape}")
    rows = 1
    for dim in shape[:-1]:
        rows *= dim
    nbytes = rows * _row_bytes(type_id, shape[-1]) if shape else 0
    return TensorInfo(name, type_id, shape, data_offset + offset, nbytes)


def _check_layout(tensors: list[TensorInfo], file_bytes: int) -> None:
    """Every tensor's bytes inside the file, none over another's: a crafted header could
    otherwise point a tensor at another's data, or past the end (a mapping of it fails
    late, with a bus error)."""
    end_of_last, last = 0, None
    for tensor in sorted(tensors, key=lambda t: t.offset):
        if tensor.offset + tensor.nbytes > file_bytes:
            raise GGUFFormatError(
                f"tensor {tensor.name!r} ({tensor.nbytes:,} bytes at {tensor.offset:,}) lies "
                f"past the file's end ({file_bytes:,} bytes)"
            )
        if last is not None and tensor.offset < end_of_last:
            raise GGUFFormatError(f"tensors {last!r} and {tensor.name!r} overlap")
        end_of_last, last = tensor.offset + tensor.nbytes, tensor.name
