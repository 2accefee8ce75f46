"""The serve process's heap: full garbage collections that follow what changed, not the size of
the heap (:class:`HeapFreezer`), and a cap on the C allocator's arenas
(:func:`limit_malloc_arenas`).

Theory of operation
-------------------
A broker's heap is mostly long-lived: every loaded topic, subscription, cursor and connection
is a few hundred objects that live as long as it does (about 800,000 objects the collector
tracks at 10,000 idle topics, before their connections). CPython's cyclic collector walks all
of them at every *full* collection, which it starts whenever the objects that survived its
younger collections reach a quarter of the long-lived ones: ~0.3-1 s of CPU per full
collection at that size, on the loop, however little changed meanwhile.

After a full collection the survivors are what is live; :class:`HeapFreezer` moves them into
the collector's permanent generation (``gc.freeze()``), which later collections do not walk,
so a full collection then costs what was allocated since. Cyclic garbage among frozen objects
(an unloaded topic whose objects reference each other) is not reclaimed while they are frozen:
every ``thaw_every_s`` they are returned to the oldest generation (``gc.unfreeze()``) and the
next full collection, which sees them all again, frees it, and is followed by a new freeze. So
memory held by such garbage is bounded by what becomes garbage in one period.

Between full collections the freezer does not wait for the collector's own: once a check
finds that young collections promoted objects into the oldest generation since the last full
collection, it runs one itself (``gc.collect(2)``, which walks only what is not frozen: what
was promoted since the last check, and the young generations) and freezes what survived. Left
to the collector, a full collection starts only when the promoted objects reach a quarter of
the survivors of the last one; after a burst of traffic (a publish of 100,000 delayed messages)
that is tens of thousands of objects, and it came in the middle of the next busy second: about
4 ms of CPU on the loop at once, which every message falling due meanwhile waited out. Checked
every second, each collection walks one second's survivors (a fraction of a ms under load), and
none is pending when the traffic comes.

Start-up is settled before the first check (:meth:`HeapFreezer.settle`: a freeze): the
modules, the configuration and the server's own objects are about 60,000-70,000 tracked objects
that live as long as the process. Left to the collector, its first full collection comes
whenever the survivors of traffic reach a quarter of them, i.e. in the middle of the first busy
second (a stream of delayed messages falling due), and walks them all: about 30 ms of CPU on
the loop, which every message due meanwhile waits out. The settle runs no collection first:
one right after the started line found nothing to free (0 unreachable of ~58,000 objects; the
collector ran all through the imports) and took 30-40 ms of the loop at the moment a restarted
broker's clients reconnect. What garbage start-up may leave is frozen with the rest and freed
at the first thaw.

The freezer runs in the ``horae serve`` process only: the collector is process-wide, and a
broker embedded in another program leaves that program's collector alone.

glibc gives a thread that finds the main arena's lock taken an arena of its own (up to eight
per core), and an arena keeps what it once held: after a publish and drain of 100,000 x 1 KiB
(``bench/wire_load.py``) the storage writer's, the fsync stage's and the read pool's threads
held 0.1-1.8 MiB each; the broker's anonymous memory outside the main heap was 30.7-31.1 MiB
after such a round, 27.7-28.8 with two arenas. Those threads allocate little and mostly while holding the GIL, so they
rarely contend for a lock: :func:`limit_malloc_arenas` caps the arenas at
:data:`MALLOC_ARENAS` (the loop's main arena and one the threads share) before any thread
starts, unless ``MALLOC_ARENA_MAX`` in the environment already chose. Also ``horae serve``
only: an embedding program's allocator is its own.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import logging
import os
from collections.abc import Mapping
from typing import Any

from storage.pacing import sleep_to_beat

__all__ = ["MALLOC_ARENAS", "THAW_EVERY_S", "HeapFreezer", "limit_malloc_arenas"]

log = logging.getLogger("horae.heap")

#: Frozen objects go back to the collector this often (cyclic garbage among them freed then).
THAW_EVERY_S = 1800.0

#: glibc malloc arenas of the serve process: the main one and one its threads share.
MALLOC_ARENAS = 2

_M_ARENA_MAX = -8   # glibc's mallopt parameter


def limit_malloc_arenas(arenas: int = MALLOC_ARENAS,
                        environ: Mapping[str, str] = os.environ) -> bool:
    """Cap glibc's malloc arenas (see the module docstring); call before any thread starts.
    False when ``MALLOC_ARENA_MAX`` is set in *environ* or the C library is not glibc."""
    if "MALLOC_ARENA_MAX" in environ:
        return False
    try:
        # the process's own symbols, libc's among them (find_library would run ldconfig)
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError, TypeError):  # not glibc: no mallopt
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_ARENA_MAX, arenas))


class HeapFreezer:
    """Freezes the survivors of each full collection (see the module docstring)."""

    def __init__(self, thaw_every_s: float = THAW_EVERY_S, check_s: float = 1.0) -> None:
        self.thaw_every_s = thaw_every_s
        self.check_s = check_s
        self._full_collections = 0   # seen by the callback (any thread)
        self._frozen_after = 0
        self.freezes = 0
        self.thaws = 0
        self.collections = 0   # full collections run by the checks themselves

    def _on_collection(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "stop" and info.get("generation") == 2:
            self._full_collections += 1

    def step(self, thaw: bool) -> None:
        """One check: freeze after a full collection, running one first when objects were
        promoted into the oldest generation since the last; with *thaw*, hand the frozen
        objects back to the collector for its next full collection."""
        if thaw:
            gc.unfreeze()
            self.thaws += 1
            self._frozen_after = self._full_collections   # freeze only after the next one
            return
        if self._full_collections == self._frozen_after:
            if not gc.get_count()[2]:
                return   # nothing promoted to the oldest generation since the last one
            gc.collect(2)   # walks what is not frozen; counted by the callback when it runs
            self.collections += 1
        self._frozen_after = self._full_collections
        gc.freeze()
        self.freezes += 1

    def settle(self) -> None:
        """Start-up is over: what it made is frozen (no collection: see the module docstring)."""
        gc.freeze()
        self.freezes += 1

    async def run(self) -> None:
        """Settles start-up, then checks until cancelled; unfreezes on the way out."""
        loop = asyncio.get_running_loop()
        self.settle()
        gc.callbacks.append(self._on_collection)
        next_thaw = loop.time() + self.thaw_every_s
        try:
            while True:
                await sleep_to_beat(self.check_s)   # with the other periodic work
                now = loop.time()
                thaw = now >= next_thaw
                if thaw:
                    next_thaw = now + self.thaw_every_s
                self.step(thaw)
        finally:
            gc.callbacks.remove(self._on_collection)
            gc.unfreeze()
