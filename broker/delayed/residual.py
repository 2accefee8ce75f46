"""Residual bucket snapshots: remove them when their subscription or topic goes away.

Theory of operation
-------------------
A bucket tracker names its snapshots in the cursor properties
(``#pulsar.internal.delayed.bucket_<start>_<end>`` and ``..._cancels``). Deleting a cursor
(unsubscribe, delete-subscription, topic deletion) drops those properties but not the
snapshots, which then stay on disk for good. As Pulsar's ``cleanResidualSnapshots`` does,
the caller that deletes a cursor first hands its properties to
:func:`delete_residual_snapshots` (whether or not a tracker is loaded: a subscription with no
consumer has none). :func:`sweep_orphan_snapshots` is the start-up backstop for a crash between
the cursor deletion and the snapshot deletion: every stored snapshot that no cursor names is
deleted. Callers: the subscription/topic deletion path and the broker's start-up.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Protocol

from broker.delayed.bucket_records import BUCKET_KEY_PREFIX

log = logging.getLogger("horae.delayed.residual")


class DeletableSnapshots(Protocol):
    """The part of storage's ``SnapshotStore`` residual cleanup uses."""

    def ids(self) -> list[int]: ...

    async def delete(self, snapshot_id: int) -> None: ...


def snapshot_ids(properties: Mapping[str, str]) -> set[int]:
    """Snapshot ids a cursor's properties name (bucket snapshots and the cancel snapshot)."""
    return {int(value) for key, value in properties.items()
            if key.startswith(BUCKET_KEY_PREFIX + "_") and value.isdigit()}


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


async def sweep_orphan_snapshots(cursor_properties: Iterable[Mapping[str, str]],
                                 store: DeletableSnapshots) -> int:
    """Delete every stored snapshot no cursor names (run before any tracker starts, so no
    snapshot is being created); how many went."""
    live: set[int] = set()
    for properties in cursor_properties:
        live |= snapshot_ids(properties)
    orphans = [snapshot_id for snapshot_id in store.ids() if snapshot_id not in live]
    for snapshot_id in orphans:
        try:
            await store.delete(snapshot_id)
        except Exception:
            log.exception("deleting orphan delayed-delivery snapshot %d failed", snapshot_id)
    return len(orphans)
