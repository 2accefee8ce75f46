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

Entries also leave by age (Pulsar's ``managedLedgerCacheEvictionTimeThresholdMillis``), in
two ways, both applied by the timer of :mod:`storage.cache_eviction`, which sets the coarse
clock :attr:`EntryCache.clock` (so a put or a hit costs no clock call):

- a chunk some reader has read and nobody read again for the threshold leaves
  (:meth:`EntryCache.evict_read_before`); the chunks once read are also kept in touch order
  (``_read``), so that walk stops at the first young one;
- once nothing was put, read from the cache or read from disk (:attr:`EntryCache.last_touch`,
  which the read path also sets) for the threshold, everything leaves
  (:meth:`EntryCache.evict_oldest`): the burst that filled the cache is over.

Both walks free at most a budget of bytes per tick, so a large cache empties over a few ticks
instead of one long stop of the loop. Unlike Pulsar, a chunk no reader has read yet does not
age out while the store is in use: a backlog drained right after it was written is still read
from memory (within the byte budget). The hook :attr:`EntryCache.on_first_put` is called by a
put into an unwatched cache, so the timer runs only while the cache holds something.

Which appends are put is the managed ledger's :class:`AppendCaching`: as in Pulsar (whose
``OpAddEntry`` caches an entry only while the managed ledger has active cursors, a cursor being
active while its subscription has consumers), the entries of a topic nobody reads, or whose
subscriptions' consumers are away, are not cached; a consumer that comes later reads them from
disk. Without that, a topic published to and not read fills the cache with entries that wait
there, holding up to the whole budget in the process's memory, and evicts the ones a live
reader is about to read. ``managedLedgerCacheForInactiveCursors`` makes any subscription count
(the drain is then read from memory, ~10% less broker CPU per message).
"""

from __future__ import annotations

import bisect
from collections import OrderedDict
from collections.abc import Callable, Sequence


class _Chunk:
    """One group commit's entries of one ledger. ``datas`` is a tuple, never a list: the
    garbage collector stops tracking a tuple of ``bytes`` at the first collection that meets
    it, while a list's every entry is visited again by each collection it takes part in, a
    cold read of each cached entry's header (the serve process's full collection each second,
    broker/heap.py, took 0.5-14 ms of the loop that way under 600 group commits a second, and
    1.2-4.2 ms with tuples)."""

    __slots__ = ("datas", "nbytes", "touched")

    def __init__(self, datas: tuple[bytes | None, ...], nbytes: int, touched: float) -> None:
        self.datas = datas  # None = discarded
        self.nbytes = nbytes
        self.touched = touched  # EntryCache.clock when last put or read


class AppendCaching:
    """Whether one managed ledger's new entries enter the :class:`EntryCache`.

    On until something over the ledger says otherwise, so a ledger used on its own (tools,
    storage benchmarks) caches as before; a topic over it calls :meth:`want` with whether it
    has an active cursor (a subscription with a consumer attached) or, with
    :attr:`for_inactive_cursors` (``managedLedgerCacheForInactiveCursors``), any subscription,
    and a shadow topic over the same ledger does too, so the entries are cached while either
    wants them. Loop-only.
    """

    __slots__ = ("_wanted_by", "for_inactive_cursors", "on")

    def __init__(self, *, for_inactive_cursors: bool = False) -> None:
        #: Inactive cursors count too (read by the topic over the ledger).
        self.for_inactive_cursors = for_inactive_cursors
        self._wanted_by: set[str] = set()
        #: Put new entries into the cache (read by the write side once per group commit).
        self.on = True

    def want(self, who: str, wanted: bool) -> None:
        """*who* (a topic's name) does or does not read this ledger's new entries."""
        if wanted:
            self._wanted_by.add(who)
        else:
            self._wanted_by.discard(who)
        self.on = bool(self._wanted_by)


class EntryCache:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.size_bytes = 0
        self.hits = 0
        self.misses = 0
        self._chunks: OrderedDict[tuple[int, int], _Chunk] = OrderedDict()
        self._starts: dict[int, list[int]] = {}  # ledger_id -> sorted first entry ids
        #: Coarse time of puts and hits (set by the eviction timer, see the module doc).
        self.clock = 0.0
        #: :attr:`clock` at the last put or hit.
        self.last_touch = 0.0
        self._read: OrderedDict[tuple[int, int], _Chunk] = OrderedDict()  # read once: by touch
        #: Called by a put into the cache while :attr:`watched` is false (then set it).
        self.on_first_put: Callable[[], None] | None = None
        self.watched = False

    def put(self, ledger_id: int, entry_id: int, data: bytes) -> None:
        self.put_many(ledger_id, entry_id, [data])

    def put_many(self, ledger_id: int, first_entry_id: int, datas: Sequence[bytes]) -> int:
        """Cache entries first_entry_id, first_entry_id + 1, ... of a ledger (new keys: a
        group commit's appends) as one chunk. Returns their total size."""
        total = sum(map(len, datas))
        if total > self.max_bytes:  # rare: one chunk per entry; entries over budget skipped
            for i, data in enumerate(datas):
                if len(data) <= self.max_bytes:
                    self._add(ledger_id, first_entry_id + i, (data,), len(data))
            return total
        if datas:
            self._add(ledger_id, first_entry_id, tuple(datas), total)
        return total

    def _add(self, ledger_id: int, first: int, datas: tuple[bytes | None, ...],
             nbytes: int) -> None:
        if not self.watched and self.on_first_put is not None:
            self.on_first_put()
        self._chunks[(ledger_id, first)] = _Chunk(datas, nbytes, self.clock)
        self.last_touch = self.clock
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
        chunks = self._chunks
        while self.size_bytes > self.max_bytes and chunks:
            self._pop_oldest()

    def _pop_oldest(self) -> int:
        key, chunk = self._chunks.popitem(last=False)
        self._read.pop(key, None)
        return self._forget(key, chunk)

    def _forget(self, key: tuple[int, int], chunk: _Chunk) -> int:
        ledger_id, first = key
        self.size_bytes -= chunk.nbytes
        starts = self._starts[ledger_id]
        if starts[0] == first:
            del starts[0]
        else:
            starts.remove(first)
        if not starts:
            del self._starts[ledger_id]
        return chunk.nbytes

    def evict_read_before(self, cutoff: float, budget: int) -> int:
        """Drop chunks read at least once and last touched before *cutoff* (an
        :attr:`clock` value), oldest first, until *budget* bytes are freed; returns the bytes
        freed."""
        read, chunks = self._read, self._chunks
        freed = 0
        while read and freed < budget:
            key, chunk = next(iter(read.items()))
            if chunk.touched >= cutoff:
                break
            del read[key]
            del chunks[key]
            freed += self._forget(key, chunk)
        return freed

    def evict_oldest(self, budget: int) -> int:
        """Drop the least recently used chunks until *budget* bytes are freed or the cache is
        empty; returns the bytes freed."""
        freed = 0
        while self._chunks and freed < budget:
            freed += self._pop_oldest()
        return freed

    @property
    def empty(self) -> bool:
        return not self._chunks

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

    def _touch(self, key: tuple[int, int], chunk: _Chunk) -> None:
        self._chunks.move_to_end(key)
        chunk.touched = self.last_touch = self.clock
        read = self._read
        if key in read:
            read.move_to_end(key)
        else:
            read[key] = chunk

    def get(self, ledger_id: int, entry_id: int) -> bytes | None:
        found = self._find(ledger_id, entry_id)
        data = None if found is None else found[1].datas[found[2]]
        if data is None:
            self.misses += 1
            return None
        self._touch(found[0], found[1])  # type: ignore[index]
        self.hits += 1
        return data

    def misses_all(self, ledger_id: int, count: int) -> bool:
        """True, with ``count`` misses counted, when nothing of the ledger is cached: every
        :meth:`get` of it would miss. False (nothing counted) otherwise."""
        if ledger_id in self._starts:
            return False
        self.misses += count
        return True

    def get_run(self, ledger_id: int, entry_id: int, limit: int) -> Sequence[bytes]:
        """Up to ``limit`` consecutive cached entries from ``entry_id`` on, all from the
        chunk holding ``entry_id`` (one lookup for the run, where :meth:`get` makes one per
        entry): the run ends at the chunk's end or its first discarded entry. Empty (one
        miss) when ``entry_id`` is not cached; counts a hit per entry returned."""
        found = self._find(ledger_id, entry_id)
        if found is None or limit <= 0:
            self.misses += 1
            return ()
        key, chunk, offset = found
        datas = chunk.datas[offset:offset + limit]
        if None in datas:
            datas = datas[:datas.index(None)]
            if not datas:
                self.misses += 1
                return ()
        self._touch(key, chunk)
        self.hits += len(datas)
        return datas  # type: ignore[return-value]  # no None left in it

    def discard(self, ledger_id: int, entry_id: int) -> None:
        found = self._find(ledger_id, entry_id)
        if found is None:
            return
        _, chunk, offset = found
        datas = chunk.datas
        data = datas[offset]
        if data is not None:
            chunk.datas = (*datas[:offset], None, *datas[offset + 1:])   # rare: a new tuple
            chunk.nbytes -= len(data)
            self.size_bytes -= len(data)

    def drop_ledger(self, ledger_id: int) -> None:
        for first in self._starts.pop(ledger_id, ()):
            chunk = self._chunks.pop((ledger_id, first))
            self._read.pop((ledger_id, first), None)
            self.size_bytes -= chunk.nbytes

    def __len__(self) -> int:
        return sum(len(c.datas) - c.datas.count(None) for c in self._chunks.values())
