"""SegmentFds: the writer thread's descriptors of open (current) segments, bounded by an LRU.

Every open managed ledger has a current segment the writer appends to. Keeping each one's
descriptor open costs one fd per topic, so with many idle topics the process runs out.
The writer keeps at most `limit` of them open: after a group commit, the least recently
written segments beyond the limit are closed (everything in them is already synced, so
closing loses nothing; a broken segment keeps its fd for the cut-back at sealing). The next
write to an evicted segment reopens it; its fd position is then unknown, so that segment's
records are written with positional writes (pwrite) from then on. Sealing an evicted
segment reopens it to truncate the zero tail. Writer thread only; all file operations
through FileOps.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Container

from storage.fileops import FileOps
from storage.segment_file import SegmentFile, WriteState


class SegmentFds:
    def __init__(self, ops: FileOps, limit: int) -> None:
        self._ops = ops
        self._limit = max(1, limit)
        self._lru: OrderedDict[SegmentFile, None] = OrderedDict()
        self.evictions = 0
        self.reopens = 0

    @property
    def open_count(self) -> int:
        return len(self._lru)

    @property
    def over_limit(self) -> bool:
        """More segments hold an fd than the limit: :meth:`evict` has work."""
        return len(self._lru) > self._limit

    def opened(self, segment: SegmentFile) -> None:
        self._lru[segment] = None
        self._lru.move_to_end(segment)

    def touch(self, segment: SegmentFile) -> None:
        if segment in self._lru:
            self._lru.move_to_end(segment)

    def reopen(self, segment: SegmentFile) -> None:
        """Open an evicted segment again (raises OSError, e.g. EMFILE)."""
        segment.fd = self._ops.open(segment.path, os.O_WRONLY)
        segment.evicted = False
        segment.positioned = False  # the fd is at 0: write at explicit offsets from now on
        self.reopens += 1
        self.opened(segment)

    def closed(self, segment: SegmentFile) -> None:
        self._lru.pop(segment, None)

    def evict(self, busy: Container[SegmentFile]) -> None:
        """Close the least recently written segments beyond the limit (not busy ones: being
        written in this group commit, nor broken ones)."""
        if len(self._lru) <= self._limit:
            return
        for segment in list(self._lru):
            if len(self._lru) <= self._limit:
                return
            if segment in busy or segment.write_state is WriteState.BROKEN or segment.fd < 0:
                continue
            del self._lru[segment]
            fd, segment.fd = segment.fd, -1
            segment.evicted = True
            self._ops.close(fd)
            self.evictions += 1
