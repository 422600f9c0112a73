"""Crafted GGUF headers (issue 35): counts and lengths past the file, too many or empty
dimensions, unknown types, tensors past the end or over each other, a zero alignment. Each is
a ``GGUFFormatError`` naming the problem, at once, with no large allocation; and through the
CLI a clear message, no traceback."""

from __future__ import annotations

import struct
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

from gateway.modelstore.gguf.reader import GGUFFormatError, read_gguf

F32 = 0
U8, ARRAY, STRING, U32 = 0, 9, 8, 4


def string(text: str | bytes, length: int | None = None) -> bytes:
    data = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(data) if length is None else length) + data


def kv_u32(key: str, value: int) -> bytes:
    return string(key) + struct.pack("<I", U32) + struct.pack("<I", value)


def tensor(name: str, dims: list[int], type_id: int = F32, offset: int = 0) -> bytes:
    packed = struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
    return string(name) + packed + struct.pack("<IQ", type_id, offset)


def gguf(kvs: list[bytes], tensors: list[bytes], counts: tuple[int, int] | None = None) -> bytes:
    tensor_count, kv_count = counts or (len(tensors), len(kvs))
    head = b"GGUF" + struct.pack("<IQQ", 3, tensor_count, kv_count)
    body = head + b"".join(kvs) + b"".join(tensors)
    return body + b"\0" * (-len(body) % 32) + b"\0" * 64  # 64 bytes of tensor data


CASES: dict[str, tuple[Callable[[], bytes], str]] = {
    "a key string of 2^62 bytes": (
        lambda: gguf([string("k", 1 << 62)], []),
        "past the file's end",
    ),
    "a u8 array of 2^60 values": (
        lambda: gguf([string("k") + struct.pack("<IIQ", ARRAY, U8, 1 << 60)], []),
        "past the file's end",
    ),
    "a string array of 2^40 strings": (
        lambda: gguf([string("k") + struct.pack("<IIQ", ARRAY, STRING, 1 << 40)], []),
        "past the file's end",
    ),
    "2^63 tensors, none there": (
        lambda: gguf([], [], counts=(1 << 63, 0)),
        "past the file's end",
    ),
    "2^63 metadata keys, none there": (
        lambda: gguf([], [], counts=(0, 1 << 63)),
        "past the file's end",
    ),
    "a tensor of 1,000 dimensions": (
        lambda: gguf([], [tensor("t", [4] * 1000)]),
        "dimensions",
    ),
    "an unknown tensor type": (lambda: gguf([], [tensor("t", [4], type_id=999)]), "unknown"),
    "an empty dimension": (lambda: gguf([], [tensor("t", [4, 0])]), "empty dimension"),
    "a tensor past the end": (lambda: gguf([], [tensor("t", [4], offset=1 << 40)]), "past"),
    "dimensions of 2^40 x 2^40 (negative as int64)": (
        lambda: gguf([], [tensor("t", [1 << 40, (1 << 64) - 4])]),
        "past",
    ),
    "two tensors over each other": (
        lambda: gguf([], [tensor("a", [8]), tensor("b", [8], offset=16)]),
        "overlap",
    ),
    "a zero alignment": (
        lambda: gguf([kv_u32("general.alignment", 0)], [tensor("t", [4])]),
        "alignment",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_crafted_header_is_refused_at_once_without_a_large_allocation(
    tmp_path: Path, case: str
) -> None:
    make, says = CASES[case]
    path = tmp_path / "crafted.gguf"
    path.write_bytes(make())
    tracemalloc.start()
    started = time.monotonic()
    try:
        with pytest.raises(GGUFFormatError, match=says):
            read_gguf(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert time.monotonic() - started < 2
    assert peak < 16 * 2**20, f"{peak:,} bytes allocated"


def test_a_well_formed_header_still_reads(tmp_path: Path) -> None:
    path = tmp_path / "fine.gguf"
    path.write_bytes(
        gguf([kv_u32("general.alignment", 32)], [tensor("a", [4]), tensor("b", [4], offset=16)])
    )
    parsed = read_gguf(path)
    assert [t.name for t in parsed.tensors] == ["a", "b"]


def test_the_cli_says_why_without_a_traceback(tmp_path: Path) -> None:
    path = tmp_path / "crafted.gguf"
    path.write_bytes(gguf([string("k", 1 << 62)], []))
    done = subprocess.run(
        [sys.executable, "-m", "gateway", "models", "show", str(path)],
        capture_output=True,
        text=True,
        env={"GATEWAY_CACHE_DIR": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert done.returncode != 0
    assert "past the file's end" in done.stderr and "Traceback" not in done.stderr
