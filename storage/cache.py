"""A store-wide LRU cache of recent entries, bounded in bytes.

Entries enter when their append becomes durable (so tailing readers are served from memory)
and leave oldest-first when the byte budget is exceeded; a hit moves an entry to the young
end. Disk reads do not enter the cache, so a catching-up reader cannot evict the tail that
live readers need. Keys are (ledger_id, entry_id); ledger ids are store-wide unique.
Loop-only (no locking).
"""

from __future__ import annotations

from collections import OrderedDict


class EntryCache:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.size_bytes = 0
        self.hits = 0
        self.misses = 0
        self._entries: OrderedDict[tuple[int, int], bytes] = OrderedDict()

    def put(self, ledger_id: int, entry_id: int, data: bytes) -> None:
        if len(data) > self.max_bytes:
            return
        key = (ledger_id, entry_id)
        old = self._entries.pop(key, None)
        if old is not None:
            self.size_bytes -= len(old)
        self._entries[key] = data
        self.size_bytes += len(data)
        entries = self._entries
        while self.size_bytes > self.max_bytes:
            _, evicted = entries.popitem(last=False)
            self.size_bytes -= len(evicted)

    def get(self, ledger_id: int, entry_id: int) -> bytes | None:
        key = (ledger_id, entry_id)
        data = self._entries.get(key)
        if data is None:
            self.misses += 1
            return None
        self._entries.move_to_end(key)
        self.hits += 1
        return data

    def discard(self, ledger_id: int, entry_id: int) -> None:
        data = self._entries.pop((ledger_id, entry_id), None)
        if data is not None:
            self.size_bytes -= len(data)

    def drop_ledger(self, ledger_id: int) -> None:
        for key in [k for k in self._entries if k[0] == ledger_id]:
            self.size_bytes -= len(self._entries.pop(key))

    def __len__(self) -> int:
        return len(self._entries)
