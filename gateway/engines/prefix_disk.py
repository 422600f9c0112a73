"""Prefix KV caches on disk, so that a warm system prompt survives a restart.

Entries are mlx-lm prompt caches saved as safetensors (``save_prompt_cache``), one file per
token prefix, under ``<cache folder>/<model id>/<weights fingerprint>/``: another model or
another import of the same model (a new fingerprint) never reuses them. Which prefixes are
stored is decided by the caller (typing hints once they are complete, the in-memory store's
entries at shutdown). The files are indexed lazily, from their headers only, the first time
a model asks; an entry is loaded when it covers more of a prompt than memory does. Damaged
files are skipped with a log line (and removed). A byte budget evicts the least recently used.
Called only from the inference thread (MLX arrays are made and saved there).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)
FORMAT = "1"
SUFFIX = ".safetensors"


@dataclass(frozen=True)
class DiskEntry:
    path: Path
    model: str
    fingerprint: str
    tokens: tuple[int, ...]
    nbytes: int
    modified: float


def weights_fingerprint(folder: Path, form: str = "") -> str:
    """Identifies one import of a model: its import record, its weights files' identity and
    the form they are held in (``gateway.engines.weights``: float32 or quantized)."""
    digest = hashlib.sha256(form.encode())
    for name in ("gateway-import.json", "config.json"):
        path = folder / name
        if path.exists():
            digest.update(path.read_bytes())
    for weights in sorted(folder.glob("*.safetensors")):
        stat = weights.stat()
        digest.update(f"{weights.name}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:16]


def read_header(path: Path) -> dict[str, str]:
    """A safetensors file's metadata, without reading its tensors."""
    with path.open("rb") as file:
        (length,) = struct.unpack("<Q", file.read(8))
        if length > 64 * 1024 * 1024:
            raise ValueError("header too large")
        header = json.loads(file.read(length))
    metadata = header.get("__metadata__")
    if not isinstance(metadata, dict):
        raise ValueError("no metadata")
    # mlx-lm stores [metadata, cache classes, scalars] flattened: ours are the "0." keys.
    return {k[2:]: v for k, v in metadata.items() if k.startswith("0.")}


class DiskPrefixes:
    def __init__(self, folder: Path, max_bytes: int) -> None:
        self.folder = folder
        self.max_bytes = max_bytes
        self.enabled = max_bytes > 0
        self._index: dict[tuple[str, str], list[DiskEntry]] = {}

    # -- reading -------------------------------------------------------------------------------

    def entries(self, model: str, fingerprint: str) -> list[DiskEntry]:
        key = (model, fingerprint)
        if key not in self._index:
            self._index[key] = self._scan(self.folder / model / fingerprint, model, fingerprint)
        return self._index[key]

    def _scan(self, folder: Path, model: str, fingerprint: str) -> list[DiskEntry]:
        found = []
        for path in sorted(folder.glob(f"*{SUFFIX}")) if folder.is_dir() else []:
            try:
                meta = read_header(path)
                if meta.get("gateway_format") != FORMAT or meta.get("fingerprint") != fingerprint:
                    raise ValueError("written for another format or import")
                tokens = tuple(int(t) for t in json.loads(meta["tokens"]))
                stat = path.stat()
            except (OSError, ValueError, KeyError, struct.error, TypeError) as exc:
                log.warning("prefix cache file %s ignored (%s)", path, exc)
                continue
            found.append(DiskEntry(path, model, fingerprint, tokens, stat.st_size, stat.st_mtime))
        return found

    def best(
        self, model: str, fingerprint: str, prompt: Sequence[int], better_than: int
    ) -> DiskEntry | None:
        """The stored entry that covers the most of ``prompt`` (leaving a token to feed)."""
        if not self.enabled:
            return None
        best: DiskEntry | None = None
        for entry in self.entries(model, fingerprint):
            size = len(entry.tokens)
            longer = best is None or size > len(best.tokens)
            if longer and better_than < size < len(prompt) and tuple(prompt[:size]) == entry.tokens:
                best = entry
        return best

    def load(self, entry: DiskEntry) -> list[Any] | None:
        """The entry's KV cache, or None (logged, removed) if the file is damaged."""
        from mlx_lm.models.cache import load_prompt_cache

        try:
            cache: list[Any] = load_prompt_cache(str(entry.path))
            if not cache or int(cache[0].offset) != len(entry.tokens):
                raise ValueError("its cache does not hold its tokens")
        except Exception as exc:  # a damaged file is any error at all: never fatal
            log.warning("prefix cache file %s ignored (%s)", entry.path, exc)
            self._remove(entry)
            return None
        os.utime(entry.path)  # recently used: evicted last
        return cache

    # -- writing -------------------------------------------------------------------------------

    def save(self, model: str, fingerprint: str, tokens: Sequence[int], cache: list[Any]) -> bool:
        """Store ``cache`` (holding exactly ``tokens``); False if it was there or too big."""
        from mlx_lm.models.cache import save_prompt_cache

        if not self.enabled or not tokens:
            return False
        tokens = tuple(tokens)
        entries = self.entries(model, fingerprint)
        if any(entry.tokens == tokens for entry in entries):
            return False
        folder = self.folder / model / fingerprint
        folder.mkdir(parents=True, exist_ok=True)
        name = hashlib.sha256(json.dumps(tokens).encode()).hexdigest()[:32]
        path = folder / f"{name}{SUFFIX}"
        partial = folder / f".{name}.partial{SUFFIX}"
        metadata = {
            "gateway_format": FORMAT,
            "model": model,
            "fingerprint": fingerprint,
            "tokens": json.dumps(tokens),
            "saved_at": str(time.time()),
        }
        save_prompt_cache(str(partial), cache, metadata)
        size = partial.stat().st_size
        if size > self.max_bytes:
            partial.unlink()
            return False
        partial.replace(path)  # atomic: a reader never sees half a file
        entries.append(DiskEntry(path, model, fingerprint, tokens, size, time.time()))
        self._evict()
        return True

    def _evict(self) -> None:
        everything = sorted(self.list(), key=lambda e: e.modified)
        total = sum(e.nbytes for e in everything)
        for entry in everything:
            if total <= self.max_bytes:
                break
            self._remove(entry)
            total -= entry.nbytes

    def _remove(self, entry: DiskEntry) -> None:
        entry.path.unlink(missing_ok=True)
        for entries in self._index.values():
            if entry in entries:
                entries.remove(entry)

    # -- the command line ----------------------------------------------------------------------

    def list(self) -> list[DiskEntry]:
        """Every stored entry, of every model and import."""
        found: list[DiskEntry] = []
        if not self.folder.is_dir():
            return found
        for model_folder in sorted(p for p in self.folder.iterdir() if p.is_dir()):
            for print_folder in sorted(p for p in model_folder.iterdir() if p.is_dir()):
                found += self._scan(print_folder, model_folder.name, print_folder.name)
        return found

    def clear(self) -> int:
        """Remove every entry; returns how many there were."""
        count = len(self.list())
        if self.folder.is_dir():
            shutil.rmtree(self.folder)
        self._index.clear()
        return count
