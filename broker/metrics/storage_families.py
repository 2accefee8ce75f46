"""Storage and publish-refusal metric families: the store's health on /metrics.

Theory of operation
-------------------
At scrape time (on the loop) :func:`storage_families` reads one typed
:class:`storage.stats.StorageStats` snapshot (``MetricsSource.storage_stats()``) and the broker's
refused-publish counts, and yields ``horae_*`` families (Pulsar has no such series; the names
are the ones deploy/prometheus/alerts.yml alerts on). Every family carries the ``cluster``
label; ``horae_publish_refused_total`` also ``reason`` (``disk``: the store is read-only).

Counters (exposed with ``_total``): fsyncs, failed fsyncs, group commits, the entries they
made durable, seconds spent in fdatasync, corrupt records,
truncated bytes, dropped entries, corrupt cursor files, cursor fallbacks, cursor save
failures, read-only entries, appends refused while read-only, entries read from the entry
cache and lookups it missed, and the storage threads' waits for the interpreter after a write
or fdatasync and the loop's yields to them (storage/handoff.py; zero without its extension).
Gauges: read-only (0/1), disk usage ratio, oldest unsaved acknowledgement age (s), cursors
failing to save now, topics whose trimming is suspended, fenced managed ledgers, open managed ledgers, entry-cache bytes,
and the copy-forward of long-delayed messages (broker/delayed/relocate.py): pending entries
held in side files, their bytes, ledgers trimmed while still held (kept as ghosts).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from storage.stats import StorageStats

__all__ = ["STORAGE_COUNTERS", "STORAGE_GAUGES", "storage_families"]

#: Counter family name (without ``_total``) -> (StorageStats field, help).
STORAGE_COUNTERS: dict[str, tuple[str, str]] = {
    "horae_storage_fsyncs": ("fsyncs", "fdatasync calls of the group-commit writer"),
    "horae_storage_fsync_failures": ("failed_fsyncs", "Failed write/fdatasync calls (the "
                                     "managed ledger is fenced; nothing of it acknowledged)"),
    "horae_storage_group_commits": ("group_commits", "Group commits (one fsync for many entries)"),
    "horae_storage_group_committed_entries": ("group_committed_entries", "Entries the group "
                                              "commits made durable"),
    "horae_storage_fsync_seconds": ("fsync_seconds", "Wall time the group-commit writer spent "
                                    "in fdatasync"),
    "horae_storage_corrupt_records": ("corrupt_records", "Records that failed their CRC32C or "
                                      "framing check (at recovery or on read); never served"),
    "horae_storage_truncated_bytes": ("truncated_bytes", "Non-zero bytes of torn tails cut off "
                                      "by recovery"),
    "horae_storage_dropped_entries": ("dropped_entries", "Entries lost to corrupt records"),
    "horae_storage_corrupt_cursors": ("corrupt_cursors", "Cursor files that failed their checks"),
    "horae_storage_cursor_fallbacks": ("cursor_fallbacks", "Cursors recovered from the previous "
                                       "generation or the earliest position"),
    "horae_storage_cursor_save_failures": ("cursor_save_failures", "Failed cursor saves"),
    "horae_storage_read_only_entered": ("read_only_entered", "Times the store turned read-only "
                                        "(disk usage reached diskUsageThreshold)"),
    "horae_storage_appends_refused_read_only": ("appends_refused_read_only",
                                                "Appends refused while read-only"),
    "horae_storage_cache_hits": ("cache_hits", "Entries read from the entry cache"),
    "horae_storage_cache_misses": ("cache_misses", "Lookups the entry cache could not answer "
                                   "(the entries were then read from disk)"),
    "horae_storage_interpreter_waits": ("interpreter_waits", "Writes and fdatasyncs of the "
                                        "storage threads after which the thread waited for "
                                        "the Python interpreter"),
    "horae_storage_interpreter_wait_seconds": ("interpreter_wait_seconds", "Time the storage "
                                               "threads waited for the Python interpreter "
                                               "after a write or fdatasync"),
    "horae_storage_interpreter_yields": ("interpreter_yields", "Times the event loop let a "
                                         "waiting storage thread take the interpreter"),
    "horae_storage_interpreter_yield_seconds": ("interpreter_yield_seconds", "Time the event "
                                                "loop spent letting storage threads take the "
                                                "interpreter"),
}

#: Gauge family name -> (StorageStats field, help).
STORAGE_GAUGES: dict[str, tuple[str, str]] = {
    "horae_storage_read_only": ("read_only", "1 while the store refuses appends (disk usage "
                                "above diskUsageThreshold until below diskUsageLwmThreshold)"),
    "horae_storage_disk_usage_ratio": ("disk_usage", "Used fraction of the data file system"),
    "horae_storage_oldest_unsaved_ack_age_seconds": ("oldest_unsaved_ack_seconds",
                                                     "Age of the oldest acknowledgement not yet "
                                                     "saved in a cursor file"),
    "horae_storage_cursors_failing_save": ("cursors_failing_save", "Cursors whose last save "
                                           "failed"),
    "horae_storage_trim_unsafe_ledgers": ("trim_unsafe_ledgers", "Topics whose trimming is "
                                          "suspended (a cursor recovered from a fallback)"),
    "horae_storage_fenced_ledgers": ("fenced_ledgers", "Managed ledgers fenced after a write "
                                     "failure"),
    "horae_storage_open_ledgers": ("open_ledgers", "Open managed ledgers"),
    "horae_storage_cache_bytes": ("cache_bytes", "Bytes in the entry cache"),
    "horae_storage_relocated_entries": ("relocated_entries", "Pending delayed entries copied "
                                        "forward into side files (their ledgers trimmed or "
                                        "trimmable)"),
    "horae_storage_relocated_bytes": ("relocated_bytes", "Bytes of the side files holding "
                                      "copied-forward delayed entries"),
    "horae_storage_relocated_ledgers": ("relocated_ledgers", "Ledgers trimmed while still held "
                                        "by pending delayed entries (served from their copies)"),
}


def storage_families(cluster: str, stats: StorageStats,
                     refused: Mapping[str, int]) -> Iterator[Metric]:
    """The storage families for one scrape (module docstring)."""
    values = stats.as_dict()
    for name, (field, doc) in STORAGE_COUNTERS.items():
        counter = CounterMetricFamily(name, doc, labels=["cluster"])
        counter.add_metric([cluster], float(values[field]))
        yield counter
    for name, (field, doc) in STORAGE_GAUGES.items():
        gauge = GaugeMetricFamily(name, doc, labels=["cluster"])
        gauge.add_metric([cluster], float(values[field]))
        yield gauge
    family = CounterMetricFamily("horae_publish_refused", "Publishes refused (SENDs dropped and "
                                 "producer creations refused), by reason", labels=["cluster",
                                                                                   "reason"])
    for reason, count in sorted(refused.items()):
        family.add_metric([cluster, reason], float(count))
    yield family
