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
deleted; :func:`sweep_at_start` runs it on what storage's ``SegmentStore.cursor_properties``
read (every cursor of every topic, both file generations, without opening a ledger) and
deletes nothing while a cursor file is unreadable (its references are unknown). A crash
between a snapshot's creation and the cursor flush naming it leaves such an orphan too (the
tracker rebuilds that bucket from the backlog). Callers: the subscription/topic deletion
path and the broker's start-up (``BrokerService.start``, before any topic is loaded).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
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


class StoredCursorProperties(Protocol):
    @property
    def properties(self) -> dict[str, str]: ...


class CursorPropertySource(Protocol):
    """What storage's ``CursorPropertyScan`` gives the start-up sweep."""

    @property
    def cursors(self) -> Sequence[StoredCursorProperties]: ...

    @property
    def unreadable(self) -> Sequence[Path]: ...


async def sweep_at_start(scan: CursorPropertySource, store: DeletableSnapshots) -> int:
    """The start-up sweep over every stored cursor's properties (module docstring): how many
    orphans went; none while some cursor file could not be read."""
    if scan.unreadable:
        log.warning("%d cursor file(s) could not be read (%s); orphan delayed-delivery "
                    "snapshots are kept until they can", len(scan.unreadable),
                    ", ".join(str(p) for p in scan.unreadable[:3]))
        return 0
    removed = await sweep_orphan_snapshots((c.properties for c in scan.cursors), store)
    if removed:
        log.info("removed %d orphan delayed-delivery snapshot(s) no subscription names", removed)
    return removed
