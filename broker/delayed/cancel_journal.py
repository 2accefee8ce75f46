"""The cancel journal of earlier versions, retired: its cancels become acknowledgements once.

Theory of operation
-------------------
Earlier versions kept every live tracker-level cancel (PIP-423) in one snapshot of its own,
named by the cursor property ``#pulsar.internal.delayed.bucket_cancels``, rewrote it on every
change and replayed it after each restart (its targets cleared in the recovered buckets, each
deferred while its bucket's membership was still being read). Every accepted cancel is now
acknowledged on the subscription's cursor instead (:mod:`broker.delayed.cancels`), which is
the whole durable record. A store such a version wrote may still hold a journal:
:func:`retire_journal`, called by the bucket tracker's recovery before anything is handed out,

1. reads it and acknowledges every target on the cursor (``delete_entry_ids``, a bitmap per
   ledger; a target acknowledged already stays so: idempotent);
2. removes the property in the same cursor write (one ``flush``): a crash before it leaves the
   journal, applied again at the next start; after it, nothing of the journal is needed;
3. deletes the snapshot (a failure or a crash leaves it to the subscription's sweep of
   residual snapshots, :mod:`broker.delayed.residual`).

A journal whose snapshot is gone loses its property (nothing to apply). One that cannot be
read raises, as a bucket snapshot's metadata does: the subscription's load fails rather than
hand out what was cancelled. Runs on the event loop; all IO is awaited.
"""

from __future__ import annotations

import logging
from typing import Final

from broker.delayed.bucket_records import BUCKET_KEY_PREFIX
from broker.delayed.cancels import journal_targets
from broker.delayed.ports import BucketCursor, SnapshotStorage
from storage.errors import SnapshotNotFoundError

log = logging.getLogger("horae.delayed.cancel_journal")

#: Cursor property naming an earlier version's cancel snapshot (parse_bucket_key ignores it;
#: the bucket prefix makes a subscription with only a journal recover its tracker on load).
CANCELS_KEY: Final = f"{BUCKET_KEY_PREFIX}_cancels"


async def retire_journal(cursor: BucketCursor, store: SnapshotStorage) -> int:
    """Apply a leftover cancel journal as acknowledgements and drop it (module docstring);
    how many targets it held (0: none)."""
    value = cursor.properties.get(CANCELS_KEY)
    if value is None:
        return 0
    if not value.isdigit():
        cursor.remove_property(CANCELS_KEY)
        await cursor.flush()
        return 0
    snapshot_id = int(value)
    try:
        targets = journal_targets(await store.load_metadata(snapshot_id))
    except SnapshotNotFoundError:
        log.warning("delayed-message cancel snapshot %d is gone", snapshot_id)
        cursor.remove_property(CANCELS_KEY)
        await cursor.flush()
        return 0
    count = 0
    for ledger_id, entry_ids in targets.items():
        cursor.delete_entry_ids(ledger_id, entry_ids)
        count += len(entry_ids)
    cursor.remove_property(CANCELS_KEY)
    await cursor.flush()
    try:
        await store.delete(snapshot_id)
    except Exception:
        log.exception("deleting the retired cancel snapshot %d failed", snapshot_id)
    log.info("%d delayed-message cancels of the cancel journal applied as acknowledgements",
             count)
    return count
