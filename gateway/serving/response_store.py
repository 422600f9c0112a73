"""Stored responses (``store: true``) in SQLite: kept across restarts, bounded by count and age.

One file (``<cache_dir>/responses.sqlite3`` by default), one table, one row per response:
the response object as returned, the request's own input items, and the response it
continued. A conversation is the chain of ``previous_id`` links, read back in one recursive
query. Every statement runs on one thread that owns the connection (``asyncio`` awaits it,
so the event loop never blocks on the disk); the database is in WAL mode, so a reader never
waits for a writer. Each write prunes what is older than ``max_age_seconds`` and the oldest
rows beyond ``max_responses``; reads ignore rows past their age even before a write prunes
them. A conversation whose earlier response was pruned or deleted can no longer continue.
"""

from __future__ import annotations

import asyncio
import functools
import json
import sqlite3
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")
SCHEMA_VERSION = 1
MAX_CHAIN = 10_000  # links followed back; a conversation longer than any context is not one

# Each kind of chain has a table of its own, of this shape, in the one file.
TABLES = ("responses", "message_threads")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS {table} (
    id TEXT PRIMARY KEY,
    created_at REAL NOT NULL,
    previous_id TEXT,
    response TEXT NOT NULL,
    input_items TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS {table}_by_age ON {table} (created_at);
"""

_CHAIN = """
WITH RECURSIVE chain (id, created_at, previous_id, response, input_items, depth) AS (
    SELECT id, created_at, previous_id, response, input_items, 0
    FROM {table} WHERE id = ? AND created_at >= ?
    UNION ALL
    SELECT r.id, r.created_at, r.previous_id, r.response, r.input_items, c.depth + 1
    FROM {table} r JOIN chain c ON r.id = c.previous_id
    WHERE r.created_at >= ? AND c.depth < ?
)
SELECT id, created_at, previous_id, response, input_items FROM chain ORDER BY depth DESC
"""


@dataclass(frozen=True)
class StoredResponse:
    id: str
    created_at: float
    previous_id: str | None
    response: dict[str, Any]  # the response object, as returned
    input_items: list[dict[str, Any]]  # the request's own items, each with an id


class BrokenChainError(Exception):
    """A response of the conversation is no longer stored (pruned or deleted)."""

    def __init__(self, missing: str) -> None:
        super().__init__(missing)
        self.missing = missing


class ResponseStore:
    """The stored responses; ``open`` before use, ``close`` at shutdown. ``table``: which
    kind of chain (Anthropic's message threads are kept the same way, in their own table)."""

    def __init__(
        self,
        path: Path,
        max_responses: int,
        max_age_seconds: float,
        clock: Callable[[], float] = time.time,
        table: str = "responses",
    ) -> None:
        if table not in TABLES:
            raise ValueError(f"unknown table {table!r}")
        self.table = table
        self.path = path
        self.max_responses = max_responses
        self.max_age_seconds = max_age_seconds
        self.clock = clock
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="response-store")
        self._db: sqlite3.Connection | None = None

    async def _run(self, work: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, functools.partial(work, *args))

    # -- lifecycle -------------------------------------------------------------------------------

    async def open(self) -> None:
        await self._run(self._open)

    def _open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=10.0)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")  # WAL: durable at each checkpoint, never corrupt
        db.executescript(_SCHEMA.format(table=self.table))
        db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        self._db = db

    async def close(self) -> None:
        if self._db is not None:
            await self._run(self._db.close)
            self._db = None
        self._thread.shutdown(wait=True)

    @property
    def db(self) -> sqlite3.Connection:
        if self._db is None:
            raise RuntimeError("the response store is not open")
        return self._db

    def _oldest_kept(self) -> float:
        return self.clock() - self.max_age_seconds

    # -- writes ----------------------------------------------------------------------------------

    async def put(self, stored: StoredResponse) -> None:
        """Keep ``stored`` (replacing a row of the same id), then prune."""
        await self._run(self._put, stored)

    def _put(self, stored: StoredResponse) -> None:
        db = self.db
        with db:  # one transaction: the row and the pruning
            db.execute("BEGIN")
            db.execute(
                f"INSERT OR REPLACE INTO {self.table} VALUES (?, ?, ?, ?, ?)",
                (
                    stored.id,
                    stored.created_at,
                    stored.previous_id,
                    json.dumps(stored.response, ensure_ascii=False),
                    json.dumps(stored.input_items, ensure_ascii=False),
                ),
            )
            self._prune(db)

    def _prune(self, db: sqlite3.Connection) -> None:
        table = self.table
        db.execute(f"DELETE FROM {table} WHERE created_at < ?", (self._oldest_kept(),))
        db.execute(
            f"DELETE FROM {table} WHERE id IN (SELECT id FROM {table} "
            "ORDER BY created_at DESC, rowid DESC LIMIT -1 OFFSET ?)",
            (self.max_responses,),
        )

    async def delete(self, response_id: str) -> bool:
        """Forget a response; False if there was none."""
        return await self._run(self._delete, response_id)

    def _delete(self, response_id: str) -> bool:
        cursor = self.db.execute(
            f"DELETE FROM {self.table} WHERE id = ? AND created_at >= ?",
            (response_id, self._oldest_kept()),
        )
        return cursor.rowcount > 0

    # -- reads -----------------------------------------------------------------------------------

    async def get(self, response_id: str) -> StoredResponse | None:
        return await self._run(self._get, response_id)

    def _get(self, response_id: str) -> StoredResponse | None:
        row = self.db.execute(
            "SELECT id, created_at, previous_id, response, input_items "
            f"FROM {self.table} WHERE id = ? AND created_at >= ?",
            (response_id, self._oldest_kept()),
        ).fetchone()
        return _stored(row) if row else None

    async def conversation(self, response_id: str) -> list[StoredResponse]:
        """The chain that ends at ``response_id``, oldest first; empty if it is not stored;
        ``BrokenChainError`` naming the first missing link if an earlier one is gone."""
        return await self._run(self._conversation, response_id)

    def _conversation(self, response_id: str) -> list[StoredResponse]:
        oldest = self._oldest_kept()
        chain_query = _CHAIN.format(table=self.table)
        rows = self.db.execute(chain_query, (response_id, oldest, oldest, MAX_CHAIN)).fetchall()
        chain = [_stored(row) for row in rows]
        if chain and chain[0].previous_id is not None and len(chain) <= MAX_CHAIN:
            raise BrokenChainError(chain[0].previous_id)
        return chain

    async def count(self) -> int:
        return await self._run(
            lambda: int(self.db.execute(f"SELECT count(*) FROM {self.table}").fetchone()[0])
        )


def _stored(row: tuple[Any, ...]) -> StoredResponse:
    return StoredResponse(
        id=row[0],
        created_at=row[1],
        previous_id=row[2],
        response=json.loads(row[3]),
        input_items=json.loads(row[4]),
    )
