"""DiskMonitor: the store's read-only mode when its disk is nearly full (as BookKeeper does).

Owned by the SegmentStore; managed ledgers only read `read_only` (loop only). BookKeeper
marks a ledger directory full at diskUsageThreshold (default 0.95) and writable again
below diskUsageLwmThreshold (default 0.90), checking every diskCheckInterval; Horae's
StorageConfig carries the same settings (disk_usage_threshold, disk_usage_lwm_threshold,
disk_check_interval_ms).

While read-only, appends fail at once with StorageReadOnlyError (nothing is fenced, no
topic needs reloading); reads, acknowledgements, cursor saves, snapshots, metadata and
trimming go on: the space between the high watermark and a full disk is their reserve,
and trimming is what frees space. Below the low watermark writes resume by themselves.

Usage is measured off the event loop (statvfs in an executor thread) at most once per
interval (and once more right after a write failed with ENOSPC, via check_soon()); the
measuring function is injectable so tests can drive the transitions.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from storage.pacing import until_beat

log = logging.getLogger("horae.storage")


@dataclass(frozen=True, slots=True)
class DiskSpace:
    total_bytes: int
    available_bytes: int  # to unprivileged writers (statvfs f_bavail)

    @property
    def usage(self) -> float:
        if self.total_bytes <= 0:
            return 0.0
        return 1.0 - self.available_bytes / self.total_bytes


def statvfs_space(path: Path) -> DiskSpace:
    """Blocking: the space of the file system holding path."""
    st = os.statvfs(path)
    return DiskSpace(st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize)


MeasureSpace = Callable[[Path], DiskSpace]


def check_watermarks(*, high: float, low: float) -> None:
    """The one rule for the two watermarks (diskUsageThreshold *high*, diskUsageLwmThreshold
    *low*): ``0 < low <= high <= 1``; ValueError otherwise. The broker's config calls it."""
    if not 0 < low <= high <= 1:
        raise ValueError("diskUsageLwmThreshold and diskUsageThreshold must satisfy 0 < "
                         f"diskUsageLwmThreshold <= diskUsageThreshold <= 1, not {low} and "
                         f"{high}")


class DiskMonitor:
    def __init__(
        self, loop: asyncio.AbstractEventLoop, path: Path, *, high: float, low: float,
        interval_s: float, measure: MeasureSpace = statvfs_space,
    ) -> None:
        check_watermarks(high=high, low=low)
        self._loop = loop
        self._path = path
        self._high = high
        self._low = low
        self._interval = max(0.001, interval_s)
        self._measure = measure
        self.read_only = False
        self.usage = 0.0
        self.read_only_entered = 0  # times the store went read-only
        self.checks = 0
        self.check_failures = 0
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None and self._high < 1:
            self._task = self._loop.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def check_soon(self) -> None:
        """Measure again without waiting for the interval (e.g. after an ENOSPC)."""
        self._wake.set()

    async def check(self) -> bool:
        """Measure now (in an executor thread) and apply the watermarks; returns read_only."""
        try:
            space = await self._loop.run_in_executor(None, self._measure, self._path)
        except OSError as exc:
            self.check_failures += 1
            log.warning("storage: measuring disk usage of %s failed: %s", self._path, exc)
            return self.read_only
        self.checks += 1
        self.apply(space.usage)
        return self.read_only

    def apply(self, usage: float) -> None:
        self.usage = usage
        if not self.read_only and usage >= self._high:
            self.read_only = True
            self.read_only_entered += 1
            log.error("storage: disk usage %.1f%% >= %.1f%% (diskUsageThreshold): read-only, "
                      "appends refused until it falls below %.1f%%", usage * 100,
                      self._high * 100, self._low * 100)
        elif self.read_only and usage < self._low:
            self.read_only = False
            log.warning("storage: disk usage %.1f%% < %.1f%% (diskUsageLwmThreshold): "
                        "writable again", usage * 100, self._low * 100)

    async def _run(self) -> None:
        while True:
            await self.check()
            self._wake.clear()
            wait = until_beat(asyncio.get_running_loop().time(), self._interval)
            with contextlib.suppress(TimeoutError):   # on the broker's beat (storage.pacing)
                await asyncio.wait_for(self._wake.wait(), wait)
