"""Stored responses (``store: true``) in SQLite: kept across restarts, bounded by count and age.

One file (``<cache_dir>/responses.sqlite3`` by default), one table, one row per response:
the response object as returned, the request's own input items, and the response it
continued. A conversation is the chain of ``previous_id`` links, read back in one recursive
query. Every statement runs on one thread that owns the connection (``asyncio`` awaits it,
so the event loop never blocks on the disk); the database is in WAL mode, so a reader never
waits for a writer. Each write prunes what is older than ``max_age_seconds`` and the oldest
rows beyond ``max_responses``; reads ignore rows past their age even before a write prunes
them. A conversation whose earlier response was pruned or deleted can no longer continue.

The file is the user's disk, and disks fail: a file that is not a database (damaged, or
something else at that path) is moved aside (``<name>.damaged-<time>``, kept for the user)
and a new one started; a store that cannot be opened or written (read-only, full, locked by
another process for longer than ``BUSY_SECONDS``) raises ``StoreUnavailableError`` (a 503
naming the file and the cause) for the requests that need it, and is opened again on the
next one. A row whose JSON does not parse is read as gone, and a chain that loops back on
itself (only a damaged or hand-edited file can hold one) as broken there.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import sqlite3
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import ParamSpec, TypeVar

from gateway.errors import ServiceUnavailableError
from gateway.seam.json_value import JSONObject, JSONValue

log = logging.getLogger(__name__)
T = TypeVar("T")
P = ParamSpec("P")
SCHEMA_VERSION = 1
# How long a write waits for another process's lock before the request gets a 503.
BUSY_SECONDS = 2.0
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
    response: JSONObject  # the response object, as returned
    input_items: list[JSONObject]  # the request's own items, each with an id


class StoreUnavailableError(ServiceUnavailableError):
    code = "store_unavailable"


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

    async def _run(self, work: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._thread, functools.partial(self._guarded, work, *args, **kwargs)
        )

    def _guarded(self, work: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """``work`` on the open store (opened again if it could not be before), its disk's
        failures as a 503 that says which file and why."""
        try:
            if self._db is None:
                self._open()
            return work(*args, **kwargs)
        except sqlite3.Error as exc:
            raise StoreUnavailableError(
                f"the response store {self.path} cannot be used: {exc}"
            ) from None

    # -- lifecycle -------------------------------------------------------------------------------

    async def open(self) -> None:
        """Open the store now; one that cannot be opened is logged, not fatal: the gateway
        serves everything else, and each request that needs the store tries again."""
        try:
            await self._run(lambda: None)
        except StoreUnavailableError as exc:
            log.error("%s; requests that need it get a 503 until it can be", exc)

    def _open(self) -> None:
        try:
            self._connect()
        except sqlite3.DatabaseError as exc:
            if "not a database" not in str(exc) and "malformed" not in str(exc):
                raise
            aside = self.path.with_name(f"{self.path.name}.damaged-{int(time.time())}")
            log.error("response store %s is damaged (%s): moved to %s", self.path, exc, aside)
            for suffix in ("", "-wal", "-shm"):
                part = self.path.with_name(self.path.name + suffix)
                if part.exists():
                    part.rename(aside.with_name(aside.name + suffix))
            self._connect()

    def _connect(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(
            self.path, check_same_thread=False, isolation_level=None, timeout=BUSY_SECONDS
        )
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")  # WAL: durable at each checkpoint
            db.executescript(_SCHEMA.format(table=self.table))
            db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            db.execute(f"SELECT count(*) FROM {self.table}").fetchone()  # reads the pages
        except sqlite3.Error:
            db.close()
            raise
        self._db = db

    async def close(self) -> None:
        if self._db is not None:
            db, self._db = self._db, None
            await asyncio.get_running_loop().run_in_executor(self._thread, db.close)
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
        return _stored(row) if row else None  # (a damaged row: None, as gone)

    async def conversation(self, response_id: str) -> list[StoredResponse]:
        """The chain that ends at ``response_id``, oldest first; empty if it is not stored;
        ``BrokenChainError`` naming the first missing link if an earlier one is gone."""
        return await self._run(self._conversation, response_id)

    def _conversation(self, response_id: str) -> list[StoredResponse]:
        oldest = self._oldest_kept()
        chain_query = _CHAIN.format(table=self.table)
        rows = self.db.execute(chain_query, (response_id, oldest, oldest, MAX_CHAIN)).fetchall()
        chain: list[StoredResponse] = []
        seen: set[str] = set()
        for row in reversed(rows):  # newest first: the first bad link breaks the chain there
            stored = _stored(row)
            if stored is None or stored.id in seen:  # damaged, or looping back on itself
                raise BrokenChainError(row[0])
            seen.add(stored.id)
            chain.append(stored)
        chain.reverse()
        if chain and chain[0].previous_id is not None and len(chain) <= MAX_CHAIN:
            raise BrokenChainError(chain[0].previous_id)
        return chain

    async def count(self) -> int:
        return await self._run(
            lambda: int(self.db.execute(f"SELECT count(*) FROM {self.table}").fetchone()[0])
        )


# A row as the queries select it: id, created_at, previous_id, response and input_items (JSON).
Row = tuple[str, float, str | None, str, str]


def _stored(row: Row) -> StoredResponse | None:
    """A row as a stored response; None for one whose JSON does not parse, or is not a
    response object and a list of item objects (damaged)."""
    response: JSONValue
    items: JSONValue
    try:
        response, items = json.loads(row[3]), json.loads(row[4])
    except (TypeError, ValueError):
        log.warning("stored response %s is damaged (not JSON): read as gone", row[0])
        return None
    if not isinstance(response, dict) or not isinstance(items, list):
        return None
    objects = [item for item in items if isinstance(item, dict)]
    if len(objects) != len(items):
        return None
    return StoredResponse(
        id=row[0], created_at=row[1], previous_id=row[2], response=response, input_items=objects
    )
