"""MetadataStore: the broker's small durable key/value state in SQLite.

One table ``kv(kind, key, value)``, value a JSON object. WAL mode with synchronous=FULL: a
put() that returned survives a crash. One worker thread owns the connection and runs every
call (so the loop never blocks on SQLite and calls are serialised in submission order); a
put()'s JSON is encoded there too.
Kinds used by the broker: "tenant", "namespace", "topic" ({"partitions": n}),
"namespace_policy", "topic_policy", "subscription". (Ledger lists are NOT kept here: each
managed ledger's directory listing is its ledger list, see storage/ledger.py.)
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from storage.errors import StorageError

T = TypeVar("T")


class MetadataStore:
    def __init__(self, path: Path, executor: ThreadPoolExecutor, conn: sqlite3.Connection) -> None:
        self.path = path
        self._executor = executor
        self._conn: sqlite3.Connection | None = conn

    @classmethod
    async def open(cls, path: Path) -> MetadataStore:
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="horae-metadata")

        def connect() -> sqlite3.Connection:
            conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute(
                "CREATE TABLE IF NOT EXISTS kv (kind TEXT NOT NULL, key TEXT NOT NULL, "
                "value TEXT NOT NULL, PRIMARY KEY (kind, key)) WITHOUT ROWID"
            )
            return conn

        loop = asyncio.get_running_loop()
        conn = await loop.run_in_executor(executor, connect)
        return cls(path, executor, conn)

    async def _run(self, fn: Any, *args: Any) -> Any:
        if self._conn is None:
            raise StorageError("metadata store is closed")
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    def _c(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StorageError("metadata store is closed")
        return self._conn

    async def get(self, kind: str, key: str) -> dict[str, Any] | None:
        def get() -> dict[str, Any] | None:
            row = self._c().execute(
                "SELECT value FROM kv WHERE kind = ? AND key = ?", (kind, key)
            ).fetchone()
            return None if row is None else dict(json.loads(row[0]))

        result: dict[str, Any] | None = await self._run(get)
        return result

    async def put(self, kind: str, key: str, value: Mapping[str, Any]) -> None:
        """Store *value* as JSON (sets and frozensets as sorted lists, tuples as lists).

        It is serialised in the metadata thread, not on the loop: the caller must not mutate
        *value* (or what it holds) until the put returns; pass immutable or fresh objects."""

        def put() -> None:
            text = json.dumps(value, separators=(",", ":"), sort_keys=True, default=_as_json)
            self._c().execute(
                "INSERT INTO kv (kind, key, value) VALUES (?, ?, ?) "
                "ON CONFLICT (kind, key) DO UPDATE SET value = excluded.value",
                (kind, key, text),
            )

        await self._run(put)

    async def delete(self, kind: str, key: str) -> bool:
        def delete() -> bool:
            cur = self._c().execute("DELETE FROM kv WHERE kind = ? AND key = ?", (kind, key))
            return cur.rowcount > 0

        result: bool = await self._run(delete)
        return result

    async def list(self, kind: str, prefix: str = "") -> list[tuple[str, dict[str, Any]]]:
        """(key, value) pairs of kind whose key starts with prefix, sorted by key."""

        def list_() -> list[tuple[str, dict[str, Any]]]:
            rows = self._c().execute(
                "SELECT key, value FROM kv WHERE kind = ? AND substr(key, 1, ?) = ? ORDER BY key",
                (kind, len(prefix), prefix),
            ).fetchall()
            return [(k, dict(json.loads(v))) for k, v in rows]

        result: list[tuple[str, dict[str, Any]]] = await self._run(list_)
        return result

    async def close(self) -> None:
        conn = self._conn
        if conn is None:
            return
        await asyncio.get_running_loop().run_in_executor(self._executor, conn.close)
        self._conn = None
        self._executor.shutdown(wait=True)


def _as_json(value: object) -> object:
    """json.dumps' fallback: sets become sorted lists (deterministic bytes)."""
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")
