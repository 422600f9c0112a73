"""Prefix KV caches on disk, so that a warm system prompt survives a restart.

Entries are mlx-lm prompt caches saved as safetensors (``gateway.engines.prefix_file``: a
checksum and a strictly validated header), one file per token prefix, under
``<cache folder>/<model id>/<weights fingerprint>/``: another model or another import of the
same model (a new fingerprint) never reuses them. Which prefixes are stored is decided by the
caller (typing hints once they are complete, the in-memory store's entries at shutdown, and
the boundaries that recur: the end of a system message). An entry serves any prompt it shares
a long enough prefix with, cut back (trimmed) to the common part, as the in-memory store does:
an entry that ends after one conversation's first question still warms the next one's system
prompt. The files are indexed lazily, from their headers only, the first time a model asks; an
entry is loaded when it covers more of a prompt than memory does. Damaged files are removed
with a log line; files half written (``.partial``) by a crash are removed at start. Saving
never fails a caller: a full disk is a log line. A byte budget evicts the least recently used.
Called only from the inference thread (MLX arrays are made and saved there).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import logging
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.engines import prefix_file
from gateway.engines.prefix_file import PARTIAL_SUFFIX, SUFFIX, DamagedFile, FileHeader
from gateway.engines.token_prefix import common_prefix

log = logging.getLogger(__name__)
# A shorter common prefix than this is not worth reading a file for (unless it is the
# whole entry): a chat template's opening tokens are common to every conversation.
MIN_REUSE_TOKENS = 32


@dataclass(frozen=True)
class DiskEntry:
    path: Path
    header: FileHeader
    nbytes: int
    modified: float

    @property
    def model(self) -> str:
        return self.header.model

    @property
    def fingerprint(self) -> str:
        return self.header.fingerprint

    @property
    def tokens(self) -> tuple[int, ...]:
        return self.header.tokens


@dataclass(frozen=True)
class DiskHit:
    """An entry and the prompt tokens it serves: all of its own, or a prefix of them."""

    entry: DiskEntry
    tokens: tuple[int, ...]


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


def cut_to(cache: list[Any], tokens: int) -> list[Any] | None:
    """A view of ``cache`` holding exactly its first ``tokens`` (None if it cannot be cut).

    The stored cache is not touched: each layer is a shallow copy. A plain ``KVCache``
    saves its whole buffer (grown in 256-token steps), so its copy gets slices of exactly
    ``tokens``; other trimmable caches are trimmed (mlx-lm's trim moves only the offset).
    """
    from mlx_lm.models.cache import KVCache, can_trim_prompt_cache, trim_prompt_cache

    length = int(getattr(cache[0], "offset", 0)) if cache else 0
    if length < tokens:
        return None
    view = [copy.copy(layer) for layer in cache]
    for layer in view:
        if type(layer) is KVCache and layer.keys is not None and layer.values is not None:
            layer.keys = layer.keys[..., :tokens, :]
            layer.values = layer.values[..., :tokens, :]
            layer.offset = tokens
    others = [layer for layer in view if type(layer) is not KVCache]
    if length == tokens or not others:
        return view
    if not can_trim_prompt_cache(others):
        return None
    trim_prompt_cache(others, length - tokens)
    return view


class DiskPrefixes:
    """The saved prefix caches of every model, under one folder and one byte budget."""

    def __init__(self, folder: Path, max_bytes: int) -> None:
        self.folder = folder
        self.max_bytes = max_bytes
        self.enabled = max_bytes > 0
        self._index: dict[tuple[str, str], list[DiskEntry]] = {}
        self._remove_partials()

    def _remove_partials(self) -> None:
        """Files a crash (or a full disk) left half written are never read: they only fill
        the disk. (A ``gateway cache list`` while a gateway saves may remove the file being
        written; that save then fails soft, with a log line.)"""
        if not self.folder.is_dir():
            return
        for partial in self.folder.glob(f"*/*/*{PARTIAL_SUFFIX}"):
            try:
                partial.unlink()
                log.info("removed the partly written prefix cache file %s", partial)
            except OSError as exc:
                log.warning("cannot remove %s (%s)", partial, exc)

    # -- reading -------------------------------------------------------------------------------

    def entries(self, model: str, fingerprint: str) -> list[DiskEntry]:
        key = (model, fingerprint)
        if key not in self._index:
            folder = self.folder / model / fingerprint
            self._index[key] = self._scan(folder, model, fingerprint, remove_damaged=True)
        return self._index[key]

    def _scan(
        self, folder: Path, model: str, fingerprint: str, remove_damaged: bool
    ) -> list[DiskEntry]:
        found = []
        paths = sorted(folder.glob(f"*{SUFFIX}")) if folder.is_dir() else []
        for path in (p for p in paths if not p.name.endswith(PARTIAL_SUFFIX)):
            try:
                header = prefix_file.read_header(path)
                if header.model != model or header.fingerprint != fingerprint:
                    raise DamagedFile("written for another model or import")
                stat = path.stat()
            except (OSError, DamagedFile) as exc:
                log.warning("prefix cache file %s ignored (%s)", path, exc)
                if remove_damaged:
                    path.unlink(missing_ok=True)
                continue
            found.append(DiskEntry(path, header, stat.st_size, stat.st_mtime))
        return found

    def best(
        self, model: str, fingerprint: str, prompt: Sequence[int], better_than: int
    ) -> DiskHit | None:
        """The stored entry sharing the longest prefix with ``prompt`` (leaving a token to
        feed), if it covers more than ``better_than`` tokens; the smaller file on a tie."""
        if not self.enabled or len(prompt) < 2:
            return None
        prompt = tuple(prompt)
        best: tuple[int, int, DiskEntry] | None = None  # (covered, -bytes, entry)
        for entry in self.entries(model, fingerprint):
            if entry.tokens[0] != prompt[0]:
                continue
            covered = common_prefix(entry.tokens, prompt, len(prompt) - 1)
            whole = covered == len(entry.tokens)
            if not whole and (not entry.header.trimmable or covered < MIN_REUSE_TOKENS):
                continue
            if covered > better_than and (best is None or (covered, -entry.nbytes) > best[:2]):
                best = (covered, -entry.nbytes, entry)
        if best is None:
            return None
        return DiskHit(best[2], prompt[: best[0]])

    def load(self, hit: DiskHit) -> list[Any] | None:
        """The hit's KV cache, cut to its tokens, or None (logged, removed) if it is damaged."""
        entry = hit.entry
        try:
            cache = prefix_file.load(entry.path, entry.header)
            cut = cut_to(cache, len(hit.tokens))
            if cut is None:
                raise DamagedFile("its cache cannot be cut to the common prefix")
        except Exception as exc:  # a damaged file is any error at all: never fatal
            log.warning("prefix cache file %s ignored (%s)", entry.path, exc)
            self._remove(entry)
            return None
        with contextlib.suppress(OSError):
            os.utime(entry.path)  # recently used: evicted last
        return cut

    # -- writing -------------------------------------------------------------------------------

    def save(self, model: str, fingerprint: str, tokens: Sequence[int], cache: list[Any]) -> bool:
        """Store the first ``len(tokens)`` tokens of ``cache`` (which holds ``tokens`` and
        perhaps more); False if it was there, too big, or could not be written (a full disk:
        logged, the partial file removed; never raised)."""
        if not self.enabled or not tokens:
            return False
        tokens = tuple(tokens)
        entries = self.entries(model, fingerprint)
        if any(entry.tokens == tokens for entry in entries):
            return False
        view = cut_to(cache, len(tokens))
        if view is None:
            return False
        folder = self.folder / model / fingerprint
        name = hashlib.sha256(json.dumps(tokens).encode()).hexdigest()[:32]
        path = folder / f"{name}{SUFFIX}"
        partial = folder / f".{name}{PARTIAL_SUFFIX}"
        metadata = {
            "model": model,
            "fingerprint": fingerprint,
            "tokens": json.dumps(tokens),
            "saved_at": str(time.time()),
        }
        try:
            folder.mkdir(parents=True, exist_ok=True)
            prefix_file.write(partial, view, metadata)
            size = partial.stat().st_size
            if size > self.max_bytes:
                partial.unlink()
                return False
            partial.replace(path)  # atomic: a reader never sees half a file
            header = prefix_file.read_header(path)
        except Exception as exc:  # a full disk, a read-only folder: the caller goes on
            log.warning("prefix cache of %d tokens not saved to disk (%s)", len(tokens), exc)
            with contextlib.suppress(OSError):
                partial.unlink(missing_ok=True)
            return False
        entries.append(DiskEntry(path, header, size, time.time()))
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
        try:
            entry.path.unlink(missing_ok=True)
        except OSError as exc:
            log.warning("cannot remove %s (%s)", entry.path, exc)
        for entries in self._index.values():
            for known in [e for e in entries if e.path == entry.path]:
                entries.remove(known)

    # -- the command line ----------------------------------------------------------------------

    def list(self) -> list[DiskEntry]:
        """Every stored entry, of every model and import (damaged files are left alone)."""
        found: list[DiskEntry] = []
        if not self.folder.is_dir():
            return found
        for model_folder in sorted(p for p in self.folder.iterdir() if p.is_dir()):
            for print_folder in sorted(p for p in model_folder.iterdir() if p.is_dir()):
                found += self._scan(print_folder, model_folder.name, print_folder.name, False)
        return found

    def clear(self) -> int:
        """Remove every entry; returns how many there were."""
        count = len(self.list())
        if self.folder.is_dir():
            shutil.rmtree(self.folder)
        self._index.clear()
        return count
