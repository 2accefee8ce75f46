"""A store-wide LRU cache of recent entries, bounded in bytes.

Entries enter when their append becomes durable (so tailing readers are served from memory)
and leave oldest-first when the byte budget is exceeded. Disk reads do not enter the cache, so
a catching-up reader cannot evict the tail that live readers need. Keys are (ledger_id,
entry_id); ledger ids are store-wide unique.

Theory of operation: the unit is a *chunk*, the consecutive entries one group commit made
durable in one ledger (put_many), so the append path costs one OrderedDict insertion and at
most a few evictions per group commit instead of one of each per entry. A lookup finds its
chunk by bisecting the ledger's sorted chunk starts. LRU order is per chunk: a hit moves its
chunk to the young end; eviction drops whole chunks, oldest first (so the cache may hold a
little less than its budget, never more). Only new entries are put (appends): a key is never
put twice. Loop-only (no locking).
"""

from __future__ import annotations

import bisect
from collections import OrderedDict
from collections.abc import Sequence


class _Chunk:
    __slots__ = ("datas", "nbytes")

    def __init__(self, datas: list[bytes | None], nbytes: int) -> None:
        self.datas = datas  # None = discarded
        self.nbytes = nbytes


class EntryCache:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.size_bytes = 0
        self.hits = 0
        self.misses = 0
        self._chunks: OrderedDict[tuple[int, int], _Chunk] = OrderedDict()
        self._starts: dict[int, list[int]] = {}  # ledger_id -> sorted first entry ids

    def put(self, ledger_id: int, entry_id: int, data: bytes) -> None:
        self.put_many(ledger_id, entry_id, [data])

    def put_many(self, ledger_id: int, first_entry_id: int, datas: Sequence[bytes]) -> int:
        """Cache entries first_entry_id, first_entry_id + 1, ... of a ledger (new keys: a
        group commit's appends) as one chunk. Returns their total size."""
        total = sum(map(len, datas))
        if total > self.max_bytes:  # rare: one chunk per entry; entries over budget skipped
            for i, data in enumerate(datas):
                if len(data) <= self.max_bytes:
                    self._add(ledger_id, first_entry_id + i, [data], len(data))
            return total
        if datas:
            self._add(ledger_id, first_entry_id, list(datas), total)
        return total

    def _add(self, ledger_id: int, first: int, datas: list[bytes | None], nbytes: int) -> None:
        self._chunks[(ledger_id, first)] = _Chunk(datas, nbytes)
        starts = self._starts.get(ledger_id)
        if starts is None:
            self._starts[ledger_id] = [first]
        elif first > starts[-1]:
            starts.append(first)
        else:
            bisect.insort(starts, first)
        self.size_bytes += nbytes
        if self.size_bytes > self.max_bytes:
            self._evict()

    def _evict(self) -> None:
        chunks, all_starts = self._chunks, self._starts
        while self.size_bytes > self.max_bytes and chunks:
            (ledger_id, first), chunk = chunks.popitem(last=False)
            self.size_bytes -= chunk.nbytes
            starts = all_starts[ledger_id]
            if starts[0] == first:
                del starts[0]
            else:
                starts.remove(first)
            if not starts:
                del all_starts[ledger_id]

    def _find(self, ledger_id: int, entry_id: int) -> tuple[tuple[int, int], _Chunk, int] | None:
        starts = self._starts.get(ledger_id)
        if starts is None:
            return None
        i = bisect.bisect_right(starts, entry_id) - 1
        if i < 0:
            return None
        key = (ledger_id, starts[i])
        chunk = self._chunks[key]
        offset = entry_id - starts[i]
        if offset >= len(chunk.datas):
            return None
        return key, chunk, offset

    def get(self, ledger_id: int, entry_id: int) -> bytes | None:
        found = self._find(ledger_id, entry_id)
        data = None if found is None else found[1].datas[found[2]]
        if data is None:
            self.misses += 1
            return None
        self._chunks.move_to_end(found[0])  # type: ignore[index]
        self.hits += 1
        return data

    def get_run(self, ledger_id: int, entry_id: int, limit: int) -> list[bytes]:
        """Up to ``limit`` consecutive cached entries from ``entry_id`` on, all from the
        chunk holding ``entry_id`` (one lookup for the run, where :meth:`get` makes one per
        entry): the run ends at the chunk's end or its first discarded entry. Empty (one
        miss) when ``entry_id`` is not cached; counts a hit per entry returned."""
        found = self._find(ledger_id, entry_id)
        if found is None or limit <= 0:
            self.misses += 1
            return []
        key, chunk, offset = found
        datas = chunk.datas[offset:offset + limit]
        if None in datas:
            datas = datas[:datas.index(None)]
            if not datas:
                self.misses += 1
                return []
        self._chunks.move_to_end(key)
        self.hits += len(datas)
        return datas  # type: ignore[return-value]  # no None left in it

    def discard(self, ledger_id: int, entry_id: int) -> None:
        found = self._find(ledger_id, entry_id)
        if found is None:
            return
        _, chunk, offset = found
        data = chunk.datas[offset]
        if data is not None:
            chunk.datas[offset] = None
            chunk.nbytes -= len(data)
            self.size_bytes -= len(data)

    def drop_ledger(self, ledger_id: int) -> None:
        for first in self._starts.pop(ledger_id, ()):
            chunk = self._chunks.pop((ledger_id, first))
            self.size_bytes -= chunk.nbytes

    def __len__(self) -> int:
        return sum(len(c.datas) - c.datas.count(None) for c in self._chunks.values())
