"""The entry cache's age limit, and memory handed back to the OS once a burst has passed.

Theory of operation
-------------------
Pulsar evicts cached entries older than ``managedLedgerCacheEvictionTimeThresholdMillis``
(1000 ms) on a timer that runs every ``managedLedgerCacheEvictionIntervalMs`` (10 ms there,
100 ms here: a tick costs tens of microseconds of the loop), so a burst does not stay cached
for the life of the process. :class:`CacheEviction` is that timer
for the store's :class:`EntryCache`: each tick sets the cache's coarse clock, drops the chunks
a reader has read and nobody read again within the threshold
(:meth:`EntryCache.evict_read_before`), and empties the cache once nothing was put or read
(from memory or disk) for the threshold (:meth:`EntryCache.evict_oldest`); each tick frees at
most :data:`TICK_BUDGET_BYTES`, and one that used it all is followed by the next within
:data:`CATCH_UP_S`. Entries no reader has read yet stay while the store is in use
(see :mod:`storage.cache`): aging them out too cost a backlog drained right
after its publish ~20% more broker CPU per message (``bench/wire_load.py``: 17.0 against
13.5-14.6 s per million), read from disk instead. The timer runs only while the cache holds
something: the tick that empties it does not re-arm, and the next put arms it again
(:attr:`EntryCache.on_first_put`), so idle topics cost no timer.

Memory the cache frees goes back to the C allocator, which keeps it: a burst of 1 KiB entries
leaves the heap fragmented, and glibc returns only a free top of the heap on its own. So once
the cache has emptied after at least :data:`RELEASE_MIN_BYTES` were evicted since the last
release, and nothing was put into it for :data:`RELEASE_DELAY_S` more, the allocator is asked
to hand every free page back (:func:`release_free_memory`: glibc's ``malloc_trim(0)``, a
no-op elsewhere; 2-5 ms on the loop after a 100 MiB burst). A returned page is faulted back in
(and zeroed by the kernel) when the next burst needs it, so the delay keeps bursts separated by
very short pauses from paying for it; it is short because that price is small: a 100,000 x
1 KiB publish-and-drain round (``bench/wire_load.py``) took ~26,900 minor faults after a
release against ~24,200 when the memory had been kept (the allocator hands back a free top of
its heap on its own, and that is faulted in again either way), a few milliseconds of broker
CPU, while a broker left idle after the round rests at ~72 MiB five seconds later instead of
~80 for a minute. Under steady traffic the cache never empties and nothing is released.
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
from collections.abc import Callable

from storage.cache import EntryCache

__all__ = ["CATCH_UP_S", "RELEASE_DELAY_S", "RELEASE_MIN_BYTES", "TICK_BUDGET_BYTES",
           "CacheEviction", "release_free_memory"]

#: Bytes evicted since the last release before emptying the cache releases memory again.
RELEASE_MIN_BYTES = 8 * 1024 * 1024

#: Seconds the emptied cache stays unused before the freed memory is released (the cache
#: empties once nothing was put or read for the age threshold, 1 s by default).
RELEASE_DELAY_S = 5.0

#: Delay of the next tick after one that freed its whole budget.
CATCH_UP_S = 0.01

#: Most bytes one tick evicts (~1-2 ms of the loop for 4 MiB of 1 KiB entries); the rest
#: waits for the next tick.
TICK_BUDGET_BYTES = 4 * 1024 * 1024


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        # the process's own symbols, libc's among them (find_library would run ldconfig)
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError, TypeError):  # not glibc: no malloc_trim
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def release_free_memory() -> bool:
    """Hand the allocator's free pages back to the OS (glibc ``malloc_trim(0)``). False when
    the C library has no such call."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


class CacheEviction:
    """Ages out the entries of *cache* (see the module doc). Loop-only."""

    def __init__(self, loop: asyncio.AbstractEventLoop, cache: EntryCache, *,
                 threshold_s: float, interval_s: float,
                 release: Callable[[], bool] = release_free_memory,
                 release_delay_s: float = RELEASE_DELAY_S) -> None:
        self._loop = loop
        self._cache = cache
        self._threshold_s = threshold_s
        self._interval_s = interval_s
        self._release = release
        self._release_delay_s = release_delay_s
        self._handle: asyncio.TimerHandle | None = None
        self._release_handle: asyncio.TimerHandle | None = None
        self._evicted_since_release = 0
        self.releases = 0
        """Times memory was handed back (tests, stats)."""
        if threshold_s > 0:
            cache.on_first_put = self._arm

    def _arm(self) -> None:
        if self._release_handle is not None:   # in use again before the release: keep it
            self._release_handle.cancel()
            self._release_handle = None
        self._cache.watched = True
        self._cache.clock = self._loop.time()
        if self._handle is None:
            self._handle = self._loop.call_later(self._interval_s, self._tick)

    def _tick(self) -> None:
        self._handle = None
        cache = self._cache
        now = self._loop.time()
        cache.clock = now
        cutoff = now - self._threshold_s
        if cache.last_touch < cutoff:
            freed = cache.evict_oldest(TICK_BUDGET_BYTES)
        else:
            freed = cache.evict_read_before(cutoff, TICK_BUDGET_BYTES)
        self._evicted_since_release += freed
        if not cache.empty:
            delay = min(self._interval_s, CATCH_UP_S) if freed >= TICK_BUDGET_BYTES \
                else self._interval_s
            self._handle = self._loop.call_later(delay, self._tick)
            return
        cache.watched = False
        if self._evicted_since_release >= RELEASE_MIN_BYTES:
            self._release_handle = self._loop.call_later(self._release_delay_s, self._release_now)

    def _release_now(self) -> None:
        self._release_handle = None
        self._evicted_since_release = 0
        if self._release():
            self.releases += 1

    def close(self) -> None:
        for handle in (self._handle, self._release_handle):
            if handle is not None:
                handle.cancel()
        self._handle = self._release_handle = None
        self._cache.on_first_put = None
