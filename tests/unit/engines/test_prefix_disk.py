"""The persisted prefix cache: longest-common-prefix reuse, and files that cannot be trusted.

Real mlx-lm KV caches of a few small layers (no model): what is saved, damaged and loaded is
exactly what the gateway writes.
"""

from __future__ import annotations

import errno
import json
import os
import random
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.engines.prefix_disk import DiskPrefixes, weights_fingerprint

MODEL, PRINT = "smol", "abc123"


def make_cache(tokens: int, layers: int = 2) -> list[Any]:
    """A KV cache whose row ``i`` holds the value ``i`` (so a trimmed copy is checkable)."""
    import mlx.core as mx
    from mlx_lm.models.cache import KVCache

    cache = []
    for layer in range(layers):
        entry = KVCache()
        rows = mx.arange(tokens, dtype=mx.float32).reshape(1, 1, tokens, 1) + layer
        entry.update_and_fetch(mx.broadcast_to(rows, (1, 2, tokens, 4)), rows * 0 + 1)
        cache.append(entry)
    return cache


def first_rows(cache: list[Any]) -> list[float]:
    layer = cache[0]
    return [float(v) for v in layer.keys[0, 0, : layer.offset, 0].tolist()]


def saved(tmp_path: Path, tokens: list[int], max_bytes: int = 1 << 30) -> DiskPrefixes:
    disk = DiskPrefixes(tmp_path, max_bytes)
    assert disk.save(MODEL, PRINT, tokens, make_cache(len(tokens)))
    return disk


def files(tmp_path: Path) -> list[Path]:
    return sorted(tmp_path.rglob("*.safetensors"))


# -- reuse by the longest common prefix ----------------------------------------------------------

SYSTEM = list(range(1000, 1100))  # a 100-token system prompt


def test_an_entry_is_reused_up_to_the_common_prefix_and_trimmed(tmp_path: Path) -> None:
    saved(tmp_path, [*SYSTEM, 5, 6, 7, 8])  # system + question A + answer
    disk = DiskPrefixes(tmp_path, 1 << 30)  # after a restart
    prompt = [*SYSTEM, 9, 9, 9]  # system + question B
    hit = disk.best(MODEL, PRINT, prompt, better_than=0)
    assert hit is not None and hit.tokens == tuple(SYSTEM)
    cache = disk.load(hit)
    assert cache is not None and cache[0].offset == len(SYSTEM)
    assert first_rows(cache) == [float(i) for i in range(len(SYSTEM))]


def test_a_whole_cached_prompt_leaves_its_last_token_to_feed(tmp_path: Path) -> None:
    disk = saved(tmp_path, SYSTEM)
    hit = disk.best(MODEL, PRINT, SYSTEM, better_than=0)
    assert hit is not None and len(hit.tokens) == len(SYSTEM) - 1
    cache = disk.load(hit)
    assert cache is not None and cache[0].offset == len(SYSTEM) - 1


def test_the_longest_common_prefix_wins_and_memory_can_beat_disk(tmp_path: Path) -> None:
    disk = saved(tmp_path, [*SYSTEM, 1, 2, 3, 4])
    assert disk.save(MODEL, PRINT, SYSTEM[:60], make_cache(60))
    hit = disk.best(MODEL, PRINT, [*SYSTEM, 1, 2, 9], better_than=0)
    assert hit is not None and len(hit.tokens) == len(SYSTEM) + 2
    assert disk.best(MODEL, PRINT, [*SYSTEM, 1, 2, 9], better_than=len(SYSTEM) + 2) is None
    # Too little in common to be worth reading a file.
    assert disk.best(MODEL, PRINT, [*SYSTEM[:5], 0, 0, 0], better_than=0) is None
    # Another import of the model never shares.
    assert disk.best(MODEL, "other", [*SYSTEM, 1], better_than=0) is None


def test_the_byte_budget_still_evicts_the_least_recently_used(tmp_path: Path) -> None:
    disk = saved(tmp_path, SYSTEM)
    one = files(tmp_path)[0].stat().st_size
    disk.max_bytes = one + one // 2
    os.utime(files(tmp_path)[0], (1, 1))
    assert disk.save(MODEL, PRINT, [7, *SYSTEM[1:]], make_cache(len(SYSTEM)))
    assert len(files(tmp_path)) == 1
    assert disk.best(MODEL, PRINT, [*SYSTEM, 1], better_than=0) is None


# -- damaged files: never an error, never garbage, removed ---------------------------------------


def rewrite_header(path: Path, change: Callable[[dict[str, Any]], Any]) -> None:
    raw = path.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    header = change(json.loads(raw[8 : 8 + length]))
    encoded = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + raw[8 + length :])


def set_tokens(value: str) -> Callable[[dict[str, Any]], Any]:
    def change(header: dict[str, Any]) -> dict[str, Any]:
        header["__metadata__"]["0.tokens"] = value
        return header

    return change


def random_data(path: Path) -> None:
    """2,000 random bytes inside the first layer's keys: a file that loads, holding garbage."""
    raw = bytearray(path.read_bytes())
    (length,) = struct.unpack("<Q", raw[:8])
    begin, _ = json.loads(raw[8 : 8 + length])["0.0"]["data_offsets"]
    start = 8 + length + begin
    raw[start : start + 2000] = random.Random(7).randbytes(2000)
    path.write_bytes(bytes(raw))


DAMAGE: dict[str, Callable[[Path], object]] = {
    "header not an object": lambda p: rewrite_header(p, lambda h: [1, 2, 3]),
    "header metadata not strings": lambda p: rewrite_header(
        p, lambda h: {**h, "__metadata__": {"0.tokens": [1]}}
    ),
    "huge token": lambda p: rewrite_header(p, set_tokens("[1e999]")),
    "deeply nested tokens": lambda p: rewrite_header(p, set_tokens("[" * 100_000 + "]" * 100_000)),
    "deeply nested header": lambda p: rewrite_header(
        p, lambda h: ("[" * 100_000 + "]" * 100_000).encode()
    ),
    "negative token": lambda p: rewrite_header(p, set_tokens(json.dumps([-1, *SYSTEM[1:]]))),
    "random bytes in the data": random_data,
    "truncated": lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 3]),
    "empty": lambda p: p.write_bytes(b""),
}


@pytest.mark.parametrize("damage", DAMAGE, ids=list(DAMAGE))
def test_a_damaged_file_is_ignored_and_removed(tmp_path: Path, damage: str) -> None:
    saved(tmp_path, [*SYSTEM, 1, 2])
    DAMAGE[damage](files(tmp_path)[0])
    disk = DiskPrefixes(tmp_path, 1 << 30)  # after a restart
    hit = disk.best(MODEL, PRINT, [*SYSTEM, 1, 2, 3], better_than=0)
    if hit is not None:  # the header passed: the data must not
        assert disk.load(hit) is None
    assert files(tmp_path) == []
    assert disk.best(MODEL, PRINT, [*SYSTEM, 1, 2, 3], better_than=0) is None


def test_a_file_for_another_model_or_import_in_this_folder_is_not_used(tmp_path: Path) -> None:
    saved(tmp_path, [*SYSTEM, 1, 2])
    path = files(tmp_path)[0]
    moved = tmp_path / MODEL / "other" / path.name
    moved.parent.mkdir()
    path.rename(moved)
    assert DiskPrefixes(tmp_path, 1 << 30).best(MODEL, "other", [*SYSTEM, 1, 2, 3], 0) is None


# -- a full disk -----------------------------------------------------------------------------------


def test_a_full_disk_fails_soft_and_leaves_no_partial_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import mlx.core as mx

    def full(path: str, *args: Any, **kwargs: Any) -> None:
        Path(path).write_bytes(b"\0" * 4096)  # half written, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(mx, "save_safetensors", full)
    disk = DiskPrefixes(tmp_path, 1 << 30)
    assert disk.save(MODEL, PRINT, SYSTEM, make_cache(len(SYSTEM))) is False
    assert list(tmp_path.rglob("*partial*")) == []
    assert disk.best(MODEL, PRINT, [*SYSTEM, 1], better_than=0) is None


def test_partial_files_left_by_a_crash_are_removed_at_start(tmp_path: Path) -> None:
    folder = tmp_path / MODEL / PRINT
    folder.mkdir(parents=True)
    leftover = folder / ".0123abcd.partial.safetensors"
    leftover.write_bytes(b"\0" * 1000)
    DiskPrefixes(tmp_path, 1 << 30)
    assert not leftover.exists()


# -- the budget, recency, the fingerprint, the command line ---------------------------------------


def test_an_entry_bigger_than_the_whole_budget_is_not_kept(tmp_path: Path) -> None:
    probe = saved(tmp_path / "probe", SYSTEM)
    one = files(tmp_path / "probe")[0].stat().st_size
    # Well below one file: its size varies by a few bytes (the save time in its header).
    disk = DiskPrefixes(tmp_path / "small", one // 2)
    assert disk.save(MODEL, PRINT, SYSTEM, make_cache(len(SYSTEM))) is False
    assert files(tmp_path / "small") == [] and list((tmp_path / "small").rglob("*partial*")) == []
    assert probe.best(MODEL, PRINT, [*SYSTEM, 1], better_than=0) is not None


def test_a_disk_without_bytes_keeps_nothing(tmp_path: Path) -> None:
    disk = DiskPrefixes(tmp_path, 0)
    assert disk.save(MODEL, PRINT, SYSTEM, make_cache(len(SYSTEM))) is False
    assert disk.best(MODEL, PRINT, [*SYSTEM, 1], better_than=0) is None and files(tmp_path) == []


def test_an_entry_that_was_loaded_is_evicted_after_one_that_was_not(tmp_path: Path) -> None:
    disk = saved(tmp_path, SYSTEM)
    other = [7, *SYSTEM[1:]]
    assert disk.save(MODEL, PRINT, other, make_cache(len(other)))
    first, second = (e.path for e in disk.entries(MODEL, PRINT))
    os.utime(first, (1, 1))
    os.utime(second, (2, 2))  # the first is the older...
    hit = disk.best(MODEL, PRINT, [*SYSTEM, 1], better_than=0)
    assert hit is not None and hit.entry.path == first and disk.load(hit) is not None
    disk.max_bytes = 2 * first.stat().st_size + first.stat().st_size // 2
    third = [8, *SYSTEM[1:]]
    assert disk.save(MODEL, PRINT, third, make_cache(len(third)))  # ...but was used since
    assert first.exists() and not second.exists()


def test_the_fingerprint_follows_the_weights_files_and_their_form(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"hidden_size": 64}')
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"\0" * 100)
    print_ = weights_fingerprint(tmp_path)
    assert weights_fingerprint(tmp_path) == print_  # stable
    assert weights_fingerprint(tmp_path, "q4") != print_  # another form of the same files
    weights.write_bytes(b"\0" * 101)
    assert weights_fingerprint(tmp_path) != print_  # another import
    changed = weights_fingerprint(tmp_path)
    (tmp_path / "config.json").write_text('{"hidden_size": 128}')
    assert weights_fingerprint(tmp_path) != changed


def test_list_shows_every_model_and_import_and_clear_removes_them(tmp_path: Path) -> None:
    disk = saved(tmp_path, SYSTEM)
    assert disk.save("big", "p2", SYSTEM, make_cache(len(SYSTEM)))
    listed = DiskPrefixes(tmp_path, 1 << 30).list()
    assert sorted((e.model, e.fingerprint, len(e.tokens)) for e in listed) == [
        ("big", "p2", len(SYSTEM)),
        (MODEL, PRINT, len(SYSTEM)),
    ]
    assert disk.clear() == 2 and files(tmp_path) == []
    assert disk.best(MODEL, PRINT, [*SYSTEM, 1], better_than=0) is None
