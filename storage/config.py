"""Storage configuration (mapped from Pulsar's managedLedger* broker.conf names by broker/config.py)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class StorageConfig:
    max_entries_per_ledger: int = 50000
    """managedLedgerMaxEntriesPerLedger: roll over to a new ledger after this many entries."""
    max_size_per_ledger_bytes: int = 2 * 1024 * 1024 * 1024
    """managedLedgerMaxSizePerLedgerMbytes (2048 MiB): roll over once a ledger holds this many bytes."""
    max_ledger_rollover_minutes: float = 240
    """managedLedgerMaxLedgerRolloverTimeMinutes: roll over a ledger this old at its next append."""
    mark_delete_rate_limit_per_sec: float = 1.0
    """managedLedgerDefaultMarkDeleteRateLimit: background cursor persists per second (<= 0: only
    on flush() and close())."""
    entry_cache_bytes: int = 64 * 1024 * 1024
    """Bytes of recent entries kept in memory (store-wide) so tailing readers never touch disk."""
    entry_cache_eviction_threshold_s: float = 1.0
    """managedLedgerCacheEvictionTimeThresholdMillis (1000 ms): a cached entry not put or read
    for this long leaves the cache (storage/cache_eviction.py); 0 keeps entries until the byte
    budget pushes them out."""
    entry_cache_eviction_interval_s: float = 0.1
    """managedLedgerCacheEvictionIntervalMs (100 ms; Pulsar's is 10): how often the age limit
    is applied while the cache holds entries."""
    entry_cache_for_inactive_cursors: bool = False
    """managedLedgerCacheForInactiveCursors: the appends of a ledger are cached while a reader
    of it exists, not only while one is active (storage/cache.py, :class:`AppendCaching`)."""
    fsync: bool = True
    """False skips fdatasync (tests/benchmarks of CPU cost only): acknowledged entries are then
    NOT crash-safe."""
    group_commit_max_delay_ms: float = 1.0
    """How long the writer thread waits for more appends after the first one of a batch arrives,
    unless group_commit_max_batch_entries are already queued. 0 = natural batching only."""
    group_commit_max_batch_entries: int = 2048
    """Stop waiting for more appends once this many are queued."""
    group_commit_early_sync_bytes: int = 1024 * 1024
    """A ledger's batch bigger than this is written in slices of about this size, and each
    slice's fdatasync starts while the next slice is written (storage/writer.py); 0 = one
    write per batch."""
    segment_prezero_bytes: int = 4 * 1024 * 1024
    """Keep up to this many bytes of written, fdatasync'ed zeros ahead of the open segment's
    write head, so an append's fdatasync overwrites initialised blocks and commits no file
    size / extent metadata (storage/writer.py). 0 disables pre-zeroing (files then grow
    with every append)."""
    segment_prezero_max_batch_bytes: int = 256 * 1024
    """A group commit that wrote at least this many bytes to a segment does not pre-zero it
    further. Zeros cost about 1.2 us per KiB of writer time (written, then flushed), the
    file-size commit of a growing file about 0.2 ms per fdatasync on this machine
    (bench/storage.py: 0.35 vs 0.16 ms per 64 KiB write+fdatasync), so pre-zeroing pays up
    to ~160 KiB per fdatasync and costs beyond: batched publish (MiB per group commit) spent
    55-61% of its samples writing zeros (bench/wire_load_baseline.md)."""
    segment_prezero_min_bytes: int = 64 * 1024
    """Smallest pre-zero step: a young segment zeroes about its own size ahead (doubling up to
    segment_prezero_bytes), so short-lived ledgers do not each write megabytes of zeros."""
    read_threads: int = 4
    """Threads serving uncached reads (disk reads never run on the event loop)."""
    index_cache_bytes: int = 64 * 1024 * 1024
    """Memory for the per-entry indexes (12 bytes per entry) of sealed segments: beyond it
    the least recently read are dropped and read back from their .idx files on demand, so
    huge ledgers open and run in bounded memory (the open segments' indexes always stay)."""
    max_open_segment_files: int = 4096
    """At most this many current segments keep a file descriptor open (LRU by last write;
    an idle topic's segment is closed and reopened on its next append)."""
    cursor_save_threads: int = 4
    """Threads saving cursor files: saves of different cursors run in parallel, so the
    window of acknowledgements a crash can lose stays short with many cursors."""
    disk_usage_threshold: float = 0.95
    """BookKeeper's diskUsageThreshold: at this fraction of the disk used the store turns
    read-only (appends refused with StorageReadOnlyError; reads, acks, cursor saves,
    snapshots, metadata and trimming go on in the space left). 1.0 disables the check."""
    disk_usage_lwm_threshold: float = 0.90
    """BookKeeper's diskUsageLwmThreshold: a read-only store takes appends again once usage
    falls below this fraction."""
    disk_check_interval_ms: int = 1000
    """BookKeeper's diskCheckInterval (its default is 10000): how often disk usage is
    measured (statvfs, off the event loop). Shorter here, so a fast producer cannot eat
    the reserve between two checks."""
