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


class SizeTotal:
    """The bytes of a ledger list's ledgers, kept as each one's :attr:`LedgerState.size_bytes`
    is set (so a total is read in O(1), not summed over the ledgers)."""

    __slots__ = ("bytes",)

    def __init__(self) -> None:
        self.bytes = 0


class LedgerState:
    """Loop-side bookkeeping of one ledger."""

    __slots__ = ("_size", "_total", "assigned_bytes", "confirmed", "ledger_id", "missing",
                 "next_entry_id", "roll_deadline", "sealed", "segment")

    def __init__(self, segment: SegmentFile, *, sealed: bool) -> None:
        self.segment = segment
        self.ledger_id = segment.ledger_id
        self.sealed = sealed
        self.confirmed = len(segment.offsets)  # entry ids < confirmed are durable (or missing)
        self.next_entry_id = self.confirmed  # next id to assign
        self._size = 0
        self._total: SizeTotal | None = None   # the list's total while the ledger is in one
        self.assigned_bytes = 0
        self.missing: BitMap | None = None  # ids dropped by recovery or a failed read
        self.roll_deadline = float("inf")  # time.monotonic() at which the ledger is too old

    @property
    def size_bytes(self) -> int:
        """Bytes of the ledger's durable and queued entries."""
        return self._size

    @size_bytes.setter
    def size_bytes(self, value: int) -> None:
        total = self._total
        if total is not None:
            total.bytes += value - self._size
        self._size = value

    def join(self, total: SizeTotal) -> None:
        """Count this ledger's bytes in *total* from now on (it joins a ledger list)."""
        if self._total is not None:
            raise ValueError(f"ledger {self.ledger_id} is already in a ledger list")
        self._total = total
        total.bytes += self._size

    def leave(self) -> None:
        """Stop counting this ledger's bytes in its list's total (it left the list)."""
        if self._total is not None:
            self._total.bytes -= self._size
            self._total = None

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
