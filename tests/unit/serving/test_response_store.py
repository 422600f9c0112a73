"""The SQLite response store: kept across a reopen, pruned by count and age, chains."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.serving.response_store import BrokenChainError, ResponseStore, StoredResponse


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def stored(id: str, at: float, previous: str | None = None) -> StoredResponse:
    return StoredResponse(id, at, previous, {"id": id, "output": []}, [{"id": f"msg_{id}"}])


async def test_a_reopened_store_still_has_its_responses(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "responses.sqlite3"
    store = ResponseStore(path, 10, 3600)
    await store.open()
    await store.put(stored("a", 0.0 + store.clock()))
    await store.close()
    again = ResponseStore(path, 10, 3600)
    await again.open()
    got = await again.get("a")
    assert got is not None and got.response == {"id": "a", "output": []}
    assert got.input_items == [{"id": "msg_a"}]
    assert await again.get("b") is None
    await again.close()


async def test_pruned_by_count_oldest_first(tmp_path: Path) -> None:
    clock = Clock()
    store = ResponseStore(tmp_path / "r.sqlite3", 3, 3600, clock)
    await store.open()
    for n in range(5):
        await store.put(stored(str(n), clock.now + n))
    assert await store.count() == 3
    assert [await store.get(str(n)) is not None for n in range(5)] == [
        False,
        False,
        True,
        True,
        True,
    ]
    await store.close()


async def test_pruned_by_age_and_hidden_before_pruning(tmp_path: Path) -> None:
    clock = Clock()
    store = ResponseStore(tmp_path / "r.sqlite3", 100, 60, clock)
    await store.open()
    await store.put(stored("old", clock.now))
    clock.now += 61
    assert await store.get("old") is None  # past its age: not found, even before a write
    assert await store.delete("old") is False
    assert await store.count() == 1
    await store.put(stored("new", clock.now))
    assert await store.count() == 1  # the write pruned it
    await store.close()


async def test_conversation_follows_the_chain_and_names_a_missing_link(tmp_path: Path) -> None:
    clock = Clock()
    store = ResponseStore(tmp_path / "r.sqlite3", 100, 3600, clock)
    await store.open()
    await store.put(stored("a", clock.now))
    await store.put(stored("b", clock.now + 1, "a"))
    await store.put(stored("c", clock.now + 2, "b"))
    assert [s.id for s in await store.conversation("c")] == ["a", "b", "c"]
    assert await store.conversation("nope") == []
    assert await store.delete("a") is True
    with pytest.raises(BrokenChainError) as broken:
        await store.conversation("c")
    assert broken.value.missing == "a"
    await store.close()


async def test_the_database_is_in_wal_mode(tmp_path: Path) -> None:
    store = ResponseStore(tmp_path / "r.sqlite3", 10, 60)
    await store.open()
    mode = await store._run(lambda: store.db.execute("PRAGMA journal_mode").fetchone()[0])
    assert mode == "wal"
    await store.close()
