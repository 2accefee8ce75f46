"""LedgerState: the loop-side bookkeeping of one ledger of a managed ledger; LedgerInfo.

Owned by the ManagedLedger (loop only); recovery (storage/recovery.py) builds the states of
the ledgers it found on disk. Invariant: entry ids < confirmed are durable (or missing:
dropped by recovery or a failed read); ids in [confirmed, next_entry_id) are being written.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyroaring import BitMap

from storage.segment_file import SegmentFile


@dataclass(frozen=True, slots=True)
class LedgerInfo:
    ledger_id: int
    entries: int
    size_bytes: int
    created_ms: int
    sealed: bool


class LedgerState:
    """Loop-side bookkeeping of one ledger."""

    __slots__ = ("assigned_bytes", "confirmed", "ledger_id", "missing", "next_entry_id",
                 "roll_deadline", "sealed", "segment", "size_bytes")

    def __init__(self, segment: SegmentFile, *, sealed: bool) -> None:
        self.segment = segment
        self.ledger_id = segment.ledger_id
        self.sealed = sealed
        self.confirmed = len(segment.offsets)  # entry ids < confirmed are durable (or missing)
        self.next_entry_id = self.confirmed  # next id to assign
        self.size_bytes = 0
        self.assigned_bytes = 0
        self.missing: BitMap | None = None  # ids dropped by recovery or a failed read
        self.roll_deadline = float("inf")  # time.monotonic() at which the ledger is too old

    @property
    def complete(self) -> bool:
        """No entry will ever be added to it."""
        return self.sealed and self.next_entry_id == self.confirmed


def recovered_ledger(
    segment: SegmentFile, entries: int, size_bytes: int, missing: list[int]
) -> LedgerState:
    led = LedgerState(segment, sealed=True)
    led.confirmed = led.next_entry_id = entries
    led.size_bytes = size_bytes
    led.assigned_bytes = size_bytes
    if missing:
        led.missing = BitMap(missing)
    return led
