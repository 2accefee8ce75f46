"""Delayed delivery: publish guard (PIP-315/437), policies, and the two trackers.

- :mod:`broker.delayed.policy`: ``DelayPolicy``, ``resolve_policy``, ``validate_policy_body``.
- :mod:`broker.delayed.guard`: ``check_and_start_publish`` (core's publish path).
- :mod:`broker.delayed.tracker`: the tracker interface and its one-timer helper.
- :mod:`broker.delayed.in_memory`: packed in-memory tracker (Pulsar's default).
- :mod:`broker.delayed.bucket`: PIP-195 bucket tracker with persisted snapshots.

:func:`create_tracker` picks one from ``delayedDeliveryTrackerFactoryClassName`` (Pulsar's
class names or the short names ``in-memory`` / ``bucket``, validated and mapped by
:attr:`broker.config.BrokerConfig.delayed_tracker_kind`). The
bucket tracker needs a durable cursor and the snapshot store; without them (a non-durable
reader) the in-memory tracker is used.

Broker config read here (:class:`broker.config.BrokerConfig`):
``delayed_delivery_tracker_factory_class_name``, ``delayed_delivery_fixed_delay_detection_lookahead``,
``delayed_delivery_min_index_count_per_bucket``,
``delayed_delivery_max_time_step_per_bucket_snapshot_segment_seconds``,
``delayed_delivery_max_indexes_per_bucket_snapshot_segment``, ``delayed_delivery_max_num_buckets``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from broker.config import BrokerConfig
from broker.delayed.bucket import BucketDelayedDeliveryTracker
from broker.delayed.in_memory import InMemoryDelayedDeliveryTracker
from broker.delayed.policy import DelayPolicy
from broker.delayed.ports import BucketCursor, SnapshotStorage
from broker.delayed.tracker import DelayedDeliveryTracker

log = logging.getLogger("horae.delayed")

def create_tracker(config: BrokerConfig, policy: DelayPolicy, *,
                   on_due: Callable[[], None], loop: asyncio.AbstractEventLoop,
                   cursor: BucketCursor | None = None, snapshots: SnapshotStorage | None = None,
                   clock_ms: Callable[[], int] | None = None) -> DelayedDeliveryTracker:
    """A tracker for one subscription (see the module docstring)."""
    kind = config.delayed_tracker_kind
    if kind == "bucket" and cursor is not None and snapshots is not None:
        return BucketDelayedDeliveryTracker(
            cursor=cursor, snapshots=snapshots, tick_time_ms=policy.tick_time_ms,
            strict=policy.strict, on_due=on_due, loop=loop, clock_ms=clock_ms,
            min_index_count_per_bucket=config.delayed_delivery_min_index_count_per_bucket,
            time_step_per_segment_ms=1000 * (
                config.delayed_delivery_max_time_step_per_bucket_snapshot_segment_seconds),
            max_indexes_per_segment=config.delayed_delivery_max_indexes_per_bucket_snapshot_segment,
            max_num_buckets=config.delayed_delivery_max_num_buckets,
        )
    if kind == "bucket":
        log.debug("bucket tracker needs a durable cursor and the snapshot store: in-memory used")
    return InMemoryDelayedDeliveryTracker(
        tick_time_ms=policy.tick_time_ms, strict=policy.strict, on_due=on_due, loop=loop,
        fixed_delay_lookahead=config.delayed_delivery_fixed_delay_detection_lookahead,
        clock_ms=clock_ms)


__all__ = ["DelayPolicy", "DelayedDeliveryTracker", "create_tracker"]
