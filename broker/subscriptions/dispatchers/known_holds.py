"""Holding new delayed messages without reading them: their deliver times were learnt at publish.

Theory of operation
-------------------
A delayed message's deliver time is known when it is published
(:mod:`broker.delayed.known_times`). A Shared or Key_Shared dispatcher about to read new
entries first calls :func:`hold_known`: over the run of entries from its read position whose
times are known it does what :meth:`Dispatcher._deliver
<broker.subscriptions.dispatchers.base.Dispatcher._deliver>` would do for each, in the same
order -- an acknowledged entry is passed over, one superseded under replace-by-key acknowledged
unseen, one due after the tracker's cutoff held (one
:meth:`~broker.delayed.delivery.DelayedDelivery.hold_run` for the run) -- and moves the read
position past them, without reading a byte. It stops at the
first entry whose time is not known or that is not due after the cutoff (an ordinary message,
a batch, a tombstone not yet superseded, one due now): the read takes it from there.

Only while nothing else would look at a fresh entry first: the caller passes no transaction
view (none in force) and no ``read_compacted`` subscription. Work per call is bounded by
:data:`MAX_KNOWN_HOLDS`; a held entry that fell due meanwhile joins the replay set, as in
``_deliver``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from pyroaring import BitMap

from broker.delayed.delivery import DelayedDelivery
from broker.subscriptions.dispatchers.cursors import SubscriptionCursor
from storage.ledger import ManagedLedger
from storage.positions import Position

__all__ = ["MAX_KNOWN_HOLDS", "hold_known"]

#: Entries one call looks at, at most (a few hundred microseconds of the loop).
MAX_KNOWN_HOLDS: Final = 256
_NONE: Final = frozenset[int]()


def hold_known(delayed: DelayedDelivery, cursor: SubscriptionCursor, ledger: ManagedLedger,
               read_from: Position, last: Position,
               add_replay: Callable[[Position], None]) -> bool:
    """Hold (or pass over) the entries from ``read_from`` (<= ``last``, the last confirmed
    one) whose deliver times are known, and move ``cursor.read_position`` past them. Returns
    whether it moved."""
    known = delayed.known_times
    if known is None:
        return False
    ledger_id, first = read_from
    limit = MAX_KNOWN_HOLDS if last.ledger_id != ledger_id else \
        min(MAX_KNOWN_HOLDS, last.entry_id - first + 1)
    times, n = known.run_from(ledger_id, first, limit)
    if not n:
        return False
    hold_after = delayed.hold_after_ms()
    if hold_after is None:
        return False
    # what the cursor has acknowledged of this ledger, read once (asked again after an
    # acknowledgement below, which may move the mark-delete position over later entries)
    through, acknowledged = cursor.deleted_in(ledger_id)
    deleted: BitMap | frozenset[int] = _NONE if acknowledged is None else acknowledged
    schedule = delayed.replacements
    # the ledger's superseded ids, looked up once (the bitmap is live: an acknowledgement
    # below adds nothing to it)
    ids = schedule.superseded_ids(ledger_id) if schedule is not None else None
    superseded: BitMap | frozenset[int] = _NONE if ids is None else ids
    held: list[Position] = []
    held_at: list[int] = []
    entry_id = first
    for at in times:
        if entry_id <= through or entry_id in deleted:
            pass
        elif entry_id in superseded:
            # replaced or cancelled by key: acknowledged unseen
            cursor.delete((Position(ledger_id, entry_id),))
            through, acknowledged = cursor.deleted_in(ledger_id)
            deleted = _NONE if acknowledged is None else acknowledged
        elif at > hold_after:
            held.append(Position(ledger_id, entry_id))
            held_at.append(at)
        else:
            break                       # not known, or not after the cutoff: read it
        entry_id += 1
    if entry_id == first:
        return False
    if held:
        for i in delayed.hold_run(held, held_at):
            add_replay(held[i])         # fell due meanwhile: delivered as a due one
    cursor.read_position = ledger.next_position(Position(ledger_id, entry_id - 1))
    return True

