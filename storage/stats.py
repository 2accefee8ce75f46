"""StorageStats: one typed snapshot of the store's counters, for the broker's /metrics and
health check. Built by SegmentStore.stats() on the loop; plain values, no references.

Counters only grow (Prometheus counters); the rest are gauges. Health: read_only,
cursors_failing_save, trim_unsafe_ledgers and fenced_ledgers are the "something is wrong"
signals (SegmentStore.health_problems() words them).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True, slots=True)
class StorageStats:
    # group commit writer
    group_commits: int
    group_committed_entries: int
    fsyncs: int
    failed_fsyncs: int
    fsync_seconds: float
    prezero_writes: int
    prezero_bytes: int
    # entry cache
    cache_bytes: int
    cache_hits: int
    cache_misses: int
    # damage found (recovery and reads)
    corrupt_records: int
    truncated_bytes: int
    dropped_entries: int
    corrupt_cursors: int
    cursor_fallbacks: int
    # cursors: the acknowledgement durability window
    oldest_unsaved_ack_seconds: float
    cursor_save_failures: int
    cursors_failing_save: int
    trim_unsafe_ledgers: int
    # disk space
    read_only: bool
    read_only_entered: int
    appends_refused_read_only: int
    disk_usage: float
    # managed ledgers
    open_ledgers: int
    fenced_ledgers: int
    # copy-forward of long-delayed entries (storage/relocation.py), over open managed ledgers
    relocated_entries: int = 0
    relocated_bytes: int = 0
    relocated_ledgers: int = 0
    # the storage threads handed the interpreter (storage/handoff.py), process-wide: waits
    # counted from a write's or fdatasync's return to the interpreter held, and the loop's
    # yields to them
    interpreter_waits: int = 0
    interpreter_wait_seconds: float = 0.0
    interpreter_yields: int = 0
    interpreter_yield_seconds: float = 0.0

    def as_dict(self) -> dict[str, int | float | bool]:
        return asdict(self)
