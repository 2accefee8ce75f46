"""Delayed delivery: publish guard (PIP-315/437), policies, the two trackers and their owner.

- :mod:`broker.delayed.policy`: ``DelayPolicy``, ``resolve_policy``, ``validate_policy_body``.
- :mod:`broker.delayed.guard`: ``check_and_start_publish`` (core's publish path).
- :mod:`broker.delayed.delivery`: ``DelayedDelivery`` (one subscription's policy and tracker,
  driven by its Shared/Key_Shared dispatcher), ``TrackerFactory`` and ``create_tracker``.
- :mod:`broker.delayed.tracker`: the tracker interface and its one-timer helper.
- :mod:`broker.delayed.indexed`: the indexed positions every in-memory index is made of.
- :mod:`broker.delayed.in_memory`: packed in-memory tracker (Pulsar's default).
- :mod:`broker.delayed.bucket`: PIP-195 bucket tracker with persisted snapshots.
"""

from __future__ import annotations

from broker.delayed.delivery import DelayedDelivery, TrackerFactory, create_tracker
from broker.delayed.policy import DelayPolicy
from broker.delayed.tracker import DelayedDeliveryTracker

__all__ = ["DelayPolicy", "DelayedDelivery", "DelayedDeliveryTracker", "TrackerFactory",
           "create_tracker"]
