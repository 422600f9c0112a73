"""One persisted prefix-cache file: an mlx-lm prompt cache (safetensors) that is checked before use.

A file on disk is input like any other: it may be truncated by a crash, hit by a bad sector,
or edited by hand. So every file carries, in its safetensors metadata, the model, the weights
fingerprint, its tokens (a plain JSON list of non-negative integers) and a CRC-32 of the whole
file (computed with the checksum's own value zeroed, then written in place). The header is
validated strictly before anything is believed (an object, string metadata, tokens that match
a flat pattern: no deep nesting, no ``1e999``), and the checksum before the tensors are loaded.
A CRC is enough: it guards against damage, not against someone who can write the folder (they
could write a valid checksum too); and it is ~5x cheaper here than SHA-256 on a 70 MB cache.
"""

from __future__ import annotations

import json
import re
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FORMAT = "2"  # "1" had no checksum: such files are removed, not trusted
SUFFIX = ".safetensors"
PARTIAL_SUFFIX = f".partial{SUFFIX}"
MAX_HEADER_BYTES = 16 * 1024 * 1024
MAX_TOKEN = 2**31 - 1
_PLACEHOLDER = "crc32:00000000"
_CHECKSUM = re.compile(r"crc32:[0-9a-f]{8}")
_TOKENS = re.compile(r"\[(?:\d{1,10}(?:, ?\d{1,10})*)?\]")  # flat: nothing to recurse into
# The cache classes mlx-lm's loader may build (it looks the name up in its module globals);
# trimmable ones can serve a shorter common prefix.
_CACHE_CLASSES = frozenset(
    {"KVCache", "QuantizedKVCache", "RotatingKVCache", "ChunkedKVCache", "ArraysCache"}
)
_TRIMMABLE = frozenset({"KVCache", "QuantizedKVCache"})


class DamagedFile(ValueError):
    """The file is not a prefix cache this gateway wrote for this model and import."""


@dataclass(frozen=True)
class FileHeader:
    model: str
    fingerprint: str
    tokens: tuple[int, ...]
    trimmable: bool  # every layer's cache can be cut back to a shorter prefix


def write(path: Path, cache: list[Any], metadata: dict[str, str]) -> None:
    """Save ``cache`` with ``metadata`` (model, fingerprint, tokens) and its checksum."""
    from mlx_lm.models.cache import save_prompt_cache

    save_prompt_cache(
        str(path), cache, {**metadata, "gateway_format": FORMAT, "checksum": _PLACEHOLDER}
    )
    raw = path.read_bytes()
    header_end = 8 + struct.unpack("<Q", raw[:8])[0]
    marker = f'"{_PLACEHOLDER}"'.encode()
    at = raw.find(marker, 0, header_end)
    if at < 0 or raw.find(marker, at + 1, header_end) >= 0:
        raise DamagedFile("cannot place the checksum")
    checksum = f"crc32:{zlib.crc32(raw):08x}".encode()
    with path.open("r+b") as file:
        file.seek(at + 1)
        file.write(checksum)


def read_header(path: Path) -> FileHeader:
    """The file's header, validated strictly (raises ``DamagedFile``); tensors are not read."""
    header, _ = _header(path)
    return header


def load(path: Path, expected: FileHeader) -> list[Any]:
    """The file's KV cache, after its checksum and header (raises ``DamagedFile``)."""
    from mlx_lm.models.cache import load_prompt_cache

    header, checksum = _header(path)
    if header != expected:
        raise DamagedFile("changed since it was indexed")
    raw = path.read_bytes()
    header_end = 8 + struct.unpack("<Q", raw[:8])[0]
    marker = f'"{checksum}"'.encode()
    at = raw.find(marker, 0, header_end)
    if at < 0 or raw.find(marker, at + 1, header_end) >= 0:
        raise DamagedFile("checksum not found once in the header")
    placeholder = f'"{_PLACEHOLDER}"'.encode()
    view = memoryview(raw)
    crc = zlib.crc32(view[at + len(marker) :], zlib.crc32(placeholder, zlib.crc32(view[:at])))
    view.release()
    del raw
    if crc != int(checksum[6:], 16):
        raise DamagedFile("checksum mismatch")
    cache: list[Any] = load_prompt_cache(str(path))
    if not cache or any(
        getattr(c, "offset", len(header.tokens)) != len(header.tokens) for c in cache
    ):
        raise DamagedFile("its cache does not hold its tokens")
    return cache


def _header(path: Path) -> tuple[FileHeader, str]:
    with path.open("rb") as file:
        size = path.stat().st_size
        prefix = file.read(8)
        if len(prefix) != 8:
            raise DamagedFile("shorter than a header")
        (length,) = struct.unpack("<Q", prefix)
        if length > MAX_HEADER_BYTES or 8 + length > size:
            raise DamagedFile("header length out of bounds")
        text = file.read(length)
    try:
        header = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise DamagedFile(f"header is not JSON ({type(exc).__name__})") from None
    if not isinstance(header, dict):
        raise DamagedFile("header is not an object")
    metadata = header.get("__metadata__")
    if not isinstance(metadata, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        raise DamagedFile("metadata is not an object of strings")
    # mlx-lm stores [metadata, cache classes, scalars] flattened: ours are the "0." keys.
    ours = {k[2:]: v for k, v in metadata.items() if k.startswith("0.")}
    classes = [v for k, v in metadata.items() if k.startswith("1.")]
    if ours.get("gateway_format") != FORMAT:
        raise DamagedFile(f"format {ours.get('gateway_format')!r}, not {FORMAT}")
    checksum = ours.get("checksum", "")
    if not _CHECKSUM.fullmatch(checksum):
        raise DamagedFile("no checksum")
    text_tokens = ours.get("tokens", "")
    if len(text_tokens) > MAX_HEADER_BYTES or not _TOKENS.fullmatch(text_tokens):
        raise DamagedFile("tokens are not a flat list of integers")
    tokens = tuple(int(t) for t in json.loads(text_tokens))
    if not tokens or max(tokens) > MAX_TOKEN:
        raise DamagedFile("tokens out of range")
    if not classes or not set(classes) <= _CACHE_CLASSES:
        raise DamagedFile("unknown cache classes")
    model, fingerprint = ours.get("model"), ours.get("fingerprint")
    if not model or not fingerprint:
        raise DamagedFile("no model or fingerprint")
    return FileHeader(model, fingerprint, tokens, set(classes) <= _TRIMMABLE), checksum
