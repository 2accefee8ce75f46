"""Residual bucket snapshots: remove them when their subscription or topic goes away.

Theory of operation
-------------------
A bucket tracker names its snapshots in the cursor properties
(``#pulsar.internal.delayed.bucket_<start>_<end>``, and ``..._cancels`` for a cancel journal an
earlier version left, :mod:`broker.delayed.cancel_journal`). Deleting a cursor
(unsubscribe, delete-subscription, topic deletion) drops those properties but not the
snapshots, which then stay on disk for good. As Pulsar's ``cleanResidualSnapshots`` does,
the caller that deletes a cursor first hands its properties to
:func:`delete_residual_snapshots` (whether or not a tracker is loaded: a subscription with no
consumer has none). The start-up backstop for a crash between the cursor deletion and the
snapshot deletion is storage's: the broker opens its store with :func:`is_snapshot_key`, and
``SegmentStore.open`` deletes every stored snapshot that no such property of any cursor file
(both generations) names, and nothing while a cursor file is unreadable (its references are
unknown). A crash between a snapshot's creation and the cursor flush naming it leaves such an
orphan too (the tracker rebuilds that bucket from the backlog). Callers: the
subscription/topic deletion path, and the broker's server when it opens the store.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Protocol

from broker.delayed.bucket_records import BUCKET_KEY_PREFIX

log = logging.getLogger("horae.delayed.residual")


class DeletableSnapshots(Protocol):
    """The part of storage's ``SnapshotStore`` residual cleanup uses."""

    async def delete(self, snapshot_id: int) -> None: ...


def is_snapshot_key(key: str) -> bool:
    """Whether a cursor property of this key names a snapshot (bucket snapshots and the cancel
    snapshot; dedup's sequence ids and users' properties do not)."""
    return key.startswith(BUCKET_KEY_PREFIX + "_")


def snapshot_ids(properties: Mapping[str, str]) -> set[int]:
    """Snapshot ids a cursor's properties name (bucket snapshots and the cancel snapshot)."""
    return {int(value) for key, value in properties.items()
            if is_snapshot_key(key) and value.isdigit()}


async def delete_residual_snapshots(properties: Mapping[str, str],
                                    store: DeletableSnapshots) -> int:
    """Delete every snapshot a (deleted) cursor's properties name; how many were named."""
    ids = snapshot_ids(properties)
    for snapshot_id in sorted(ids):
        try:
            await store.delete(snapshot_id)
        except Exception:
            log.exception("deleting residual delayed-delivery snapshot %d failed", snapshot_id)
    return len(ids)
