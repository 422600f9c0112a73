"""The response store on a failing disk (issue 35): a damaged file, a lock held by another
process, a path that cannot be opened, a full disk, damaged rows, chains that loop or run
thousands long, and several writers at once. Each is a clear 503 or a row read as gone,
never an unhandled ``sqlite3`` error (a 500), and the store recovers once the disk does."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gateway.serving.response_store import (
    BUSY_SECONDS,
    BrokenChainError,
    ResponseStore,
    StoredResponse,
    StoreUnavailableError,
)


def stored(id: str, previous: str | None = None) -> StoredResponse:
    return StoredResponse(id, time.time(), previous, {"id": id, "output": []}, [{"id": "m"}])


async def opened(path: Path, max_responses: int = 100_000) -> ResponseStore:
    store = ResponseStore(path, max_responses, 3600)
    await store.open()
    return store


async def test_a_damaged_file_is_moved_aside_and_a_new_store_started(tmp_path: Path) -> None:
    path = tmp_path / "responses.sqlite3"
    damage = b"SQLite format 3\x00" + bytes(range(256)) * 64  # a header, then garbage
    path.write_bytes(damage)
    store = await opened(path)
    await store.put(stored("a"))
    assert (await store.get("a")) is not None
    await store.close()
    aside = list(tmp_path.glob("responses.sqlite3.damaged-*"))
    assert len(aside) == 1 and aside[0].read_bytes() == damage  # kept for the user


async def test_a_path_that_cannot_be_opened_is_a_503_until_it_can(tmp_path: Path) -> None:
    path = tmp_path / "responses.sqlite3"
    path.mkdir()  # (as root, a read-only file would still be written: a folder cannot be)
    store = await opened(path)  # logged, not fatal: the gateway serves everything else
    with pytest.raises(StoreUnavailableError, match="cannot be used"):
        await store.put(stored("a"))
    with pytest.raises(StoreUnavailableError):
        await store.get("a")
    path.rmdir()  # the disk is fixed: the next request opens it
    await store.put(stored("a"))
    assert (await store.get("a")) is not None
    await store.close()


HOLD_LOCK = """
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
"""


async def test_a_lock_held_by_another_process_is_a_503_after_a_bounded_wait(
    tmp_path: Path,
) -> None:
    path = tmp_path / "responses.sqlite3"
    store = await opened(path)
    await store.put(stored("a"))
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(path), "30"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        started = time.monotonic()
        with pytest.raises(StoreUnavailableError, match="locked"):
            await store.put(stored("b"))
        assert time.monotonic() - started < BUSY_SECONDS + 3
        assert (await store.get("a")) is not None  # WAL: reading is not blocked
    finally:
        holder.kill()
        holder.wait()
    await store.put(stored("b"))  # the lock gone: written
    await store.close()


async def test_a_full_disk_is_a_503_and_what_was_stored_stays(tmp_path: Path) -> None:
    store = await opened(tmp_path / "responses.sqlite3")
    await store.put(stored("a"))
    # SQLite's own page cap gives the error a full disk gives (SQLITE_FULL).
    store.db.execute("PRAGMA max_page_count = 8")
    big = StoredResponse("big", time.time(), None, {"text": "x" * 200_000}, [])
    with pytest.raises(StoreUnavailableError, match="full"):
        await store.put(big)
    assert (await store.get("a")) is not None
    await store.close()


async def test_damaged_rows_are_read_as_gone_and_break_their_chain(tmp_path: Path) -> None:
    store = await opened(tmp_path / "responses.sqlite3")
    for id, previous in (("a", None), ("b", "a"), ("c", "b")):
        await store.put(stored(id, previous))
    store.db.execute("UPDATE responses SET response = '{not json' WHERE id = 'b'")
    assert await store.get("b") is None
    with pytest.raises(BrokenChainError) as broken:
        await store.conversation("c")
    assert broken.value.missing == "b"
    await store.close()


async def test_a_chain_that_loops_back_is_broken_not_followed(tmp_path: Path) -> None:
    store = await opened(tmp_path / "responses.sqlite3")
    await store.put(stored("a", "c"))  # only a hand-edited or damaged file holds a loop
    await store.put(stored("b", "a"))
    await store.put(stored("c", "b"))
    started = time.monotonic()
    with pytest.raises(BrokenChainError):
        await store.conversation("c")
    assert time.monotonic() - started < 5
    await store.close()


async def test_a_chain_thousands_long_is_read_in_one_query(tmp_path: Path) -> None:
    store = await opened(tmp_path / "responses.sqlite3")
    db = store.db
    now = time.time()
    with db:
        db.execute("BEGIN")
        db.executemany(
            "INSERT INTO responses VALUES (?, ?, ?, ?, ?)",
            [
                (f"r{n}", now, f"r{n - 1}" if n else None, '{"output": []}', "[]")
                for n in range(5000)
            ],
        )
    started = time.monotonic()
    chain = await store.conversation("r4999")
    assert [s.id for s in chain[:2]] == ["r0", "r1"] and len(chain) == 5000
    assert time.monotonic() - started < 10
    await store.close()


async def test_many_writers_at_once_lose_nothing(tmp_path: Path) -> None:
    """Two stores on one file (two gateways) and 200 concurrent puts each."""
    path = tmp_path / "responses.sqlite3"
    first, second = await opened(path), await opened(path)
    await asyncio.gather(
        *(first.put(stored(f"a{n}")) for n in range(200)),
        *(second.put(stored(f"b{n}")) for n in range(200)),
    )
    assert await first.count() == 400
    await first.close()
    await second.close()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
