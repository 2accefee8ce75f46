"""Bucket snapshots (PIP-195): cutting segments and their encoding.

Theory of operation
-------------------
A sealed bucket is one snapshot: part 0 a ``SnapshotMetadata`` (delayed_index.proto), parts
1..N its segments (storage numbering = Pulsar's snapshot-ledger entry ids).

- :func:`cut_segments` walks a bucket's indexes in deliver-time order and starts a new segment
  when the current one holds ``max_indexes`` indexes (<= 0: unlimited) or the next time is
  past ``first time of the segment + time_step - 1`` (Pulsar's MutableBucket rule) and the
  segment holds at least :func:`min_indexes` (a tenth of ``max_indexes``): sparse due times
  (delays spread over months) would otherwise make one segment, with its metadata, per index.
  So segment k+1 never holds a time earlier than segment k, and loading one segment at a time
  per bucket keeps delivery in time order.
- Each ``SnapshotSegmentMetadata`` carries the segment's min/max deliver time and, per ledger,
  a serialized 32-bit roaring bitmap (portable format) of the entry ids it indexes: recovery
  rebuilds a bucket's membership from the metadata alone, without reading segments.
- PIP-423 CANCEL indexes (``delayed_operation_type = CANCEL``, timestamp 0) lead segment 1 and
  are not in the bitmaps: they cancel a DELAY index of an older bucket, and being first they
  are applied as soon as the bucket's first segment is loaded. Snapshots of older Horae
  versions carry them; snapshots written now never do (a cancel's record is the
  subscription's acknowledgement of its target, :mod:`broker.delayed.cancels`).
- Segments are written in a packed layout (:func:`encode_packed_segment`): a marker whose
  first byte is 0 (never the start of a protobuf message: field number 0 does not exist),
  two counts, then the CANCEL targets, the deliver times and the packed positions as
  little-endian 64-bit columns. Decoding is a copy of three arrays, no per-index work, so a
  recovery that must read thousands of first segments is bound by IO, not by parsing.
  :func:`decode_segment` still reads the ``SnapshotSegment`` protobuf of snapshots written
  before (the metadata stays Pulsar's ``SnapshotMetadata`` in both).
- The cursor property :data:`FORMAT_KEY` = :data:`FORMAT_NO_SEGMENT_CANCELS` says that no live
  snapshot of the subscription carries such CANCELs: recovery may then serve as soon as every
  metadata is read, loading first segments in the background. Without it (a store written by
  an older version) recovery reads every first segment before anything is handed out.
- A snapshot's *summary* (:class:`BucketSummary`, :func:`encode_summary`: its ledger range, the
  first deliver time of its first segment, its index count; 40 bytes) is stored beside it by
  the snapshot store, all of them readable in one read: recovery orders the buckets by it and
  serves the earliest before the others' metadata is read. It is advisory: a summary that is
  missing, unreadable or names another range than the cursor property is ignored (that
  bucket's metadata is read before serving), and the metadata, once read, is what counts.

Encoding is CPU work only (no IO); the bucket tracker runs it in an executor thread.
"""

from __future__ import annotations

import struct
import sys
from array import array
from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

from pyroaring import BitMap

from broker.delayed.packed import POSITION_BITS, POSITION_MASK
from protocol.generated import delayed_index_pb2

# The generated module has no type stubs: its messages are typed as Any here.
dpb: Any = delayed_index_pb2

#: Cursor property naming the snapshot format of a subscription's delayed index (module
#: docstring); its one value says that no live snapshot has CANCEL indexes in a segment.
FORMAT_KEY: Final = "#horae.delayed.snapshot_format"
FORMAT_NO_SEGMENT_CANCELS: Final = "2"

#: A bucket summary: version, start ledger, end ledger, first deliver time, indexes, segments.
_SUMMARY = struct.Struct("<Bqqqqi")
_SUMMARY_VERSION: Final = 1


class BucketSummary(NamedTuple):
    """What a snapshot's summary says of its bucket (module docstring). A tuple: a recovery
    decodes tens of thousands of them before it serves."""

    start_ledger: int
    end_ledger: int
    first_ts: int           # first deliver time of segment 1, epoch ms
    indexes: int            # indexes the snapshot holds
    segments: int


def encode_summary(summary: BucketSummary) -> bytes:
    return _SUMMARY.pack(_SUMMARY_VERSION, summary.start_ledger, summary.end_ledger,
                         summary.first_ts, summary.indexes, summary.segments)


def decode_summary(data: bytes) -> BucketSummary | None:
    """The summary, or None when it is not one this version reads."""
    if len(data) != _SUMMARY.size:
        return None
    version, start, end, first_ts, indexes, segments = _SUMMARY.unpack(data)
    if version != _SUMMARY_VERSION or start > end or segments < 1 or indexes < 1:
        return None
    return BucketSummary._make((start, end, first_ts, indexes, segments))


#: The start of a segment in the packed layout (module docstring).
PACKED_MAGIC: Final = b"\x00HS2"
_PACKED_COUNTS = struct.Struct("<II")
_PACKED_HEAD = len(PACKED_MAGIC) + _PACKED_COUNTS.size

#: A segment before encoding: parallel columns of deliver times (int64) and packed positions
#: (uint64), in time order.
RawSegment = tuple["array[int]", "array[int]"]


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    """One segment's metadata, decoded."""

    min_ts: int
    max_ts: int
    bitmaps: dict[int, BitMap]


@dataclass(frozen=True, slots=True)
class DecodedSegment:
    """One segment, decoded into packed columns (time order) plus its CANCEL targets."""

    ts: array[int]
    pos: array[int]
    cancels: list[int]


def min_indexes(max_indexes: int) -> int:
    """Indexes a segment holds before the time step may end it."""
    return max(max_indexes // 10, 1)


def cut_segments(items: Iterable[tuple[int, int]], time_step_ms: int,
                 max_indexes: int) -> list[RawSegment]:
    """Split time-ordered ``(deliver_at_ms, packed)`` pairs into segments."""
    segments: list[RawSegment] = []
    ts_list: array[int] = array("q")
    pos_list: array[int] = array("Q")
    upper = 0
    limit = max_indexes if max_indexes > 0 else -1
    least = min_indexes(max_indexes)
    step = max(time_step_ms, 1)
    for ts, packed in items:
        if ts_list and ((ts > upper and len(ts_list) >= least) or len(ts_list) == limit):
            segments.append((ts_list, pos_list))
            ts_list, pos_list = array("q"), array("Q")
        if not ts_list:
            upper = ts + step - 1
        ts_list.append(ts)
        pos_list.append(packed)
    if ts_list:
        segments.append((ts_list, pos_list))
    return segments


def cut_columns(ts_col: array[int], pos_col: array[int], time_step_ms: int,
                max_indexes: int) -> list[RawSegment]:
    """:func:`cut_segments` for time-ordered columns, by bisection (no per-index Python)."""
    segments: list[RawSegment] = []
    n = len(ts_col)
    step = max(time_step_ms, 1)
    least = min_indexes(max_indexes)
    i = 0
    while i < n:
        end = max(bisect_right(ts_col, ts_col[i] + step - 1, i), min(i + least, n))
        if max_indexes > 0:
            end = min(end, i + max_indexes)
        segments.append((ts_col[i:end], pos_col[i:end]))
        i = end
    return segments


def segment_bitmaps(pos_list: Iterable[int]) -> dict[int, BitMap]:
    """Entry ids per ledger of packed positions."""
    grouped: dict[int, list[int]] = {}
    for packed in pos_list:
        ledger_id = packed >> POSITION_BITS
        entries = grouped.get(ledger_id)
        if entries is None:
            entries = grouped[ledger_id] = []
        entries.append(packed & POSITION_MASK)
    return {ledger_id: BitMap(entries) for ledger_id, entries in grouped.items()}


def _le_bytes(column: array[int]) -> bytes:
    if sys.byteorder == "little":
        return column.tobytes()
    swapped = array(column.typecode, column)
    swapped.byteswap()
    return swapped.tobytes()


def encode_packed_segment(ts_list: array[int], pos_list: array[int],
                          cancels: list[int]) -> bytes:
    """One segment in the packed layout: marker, (CANCEL count, index count), then the
    CANCEL targets, the deliver times and the packed positions, little-endian 64-bit."""
    return b"".join((PACKED_MAGIC, _PACKED_COUNTS.pack(len(cancels), len(ts_list)),
                     _le_bytes(array("Q", cancels)), _le_bytes(array("q", ts_list)),
                     _le_bytes(array("Q", pos_list))))


def _protobuf_segment(ts_list: array[int], pos_list: array[int], cancels: list[int]) -> bytes:
    """One segment as Pulsar's ``SnapshotSegment`` (the layout of older snapshots)."""
    segment = dpb.SnapshotSegment()
    add = segment.indexes.add
    for packed in cancels:
        add(timestamp=0, ledger_id=packed >> POSITION_BITS,
            entry_id=packed & POSITION_MASK, delayed_operation_type=dpb.CANCEL)
    for ts, packed in zip(ts_list, pos_list, strict=True):
        add(timestamp=ts, ledger_id=packed >> POSITION_BITS, entry_id=packed & POSITION_MASK)
    return bytes(segment.SerializeToString())


def encode_snapshot(segments: list[RawSegment], cancels: list[int], *,
                    packed: bool = True) -> tuple[bytes, list[bytes]]:
    """Serialize a bucket: (metadata bytes, [segment bytes]). ``cancels`` are packed targets
    (they lead segment 1). ``packed=False`` writes segments as ``SnapshotSegment`` protobufs,
    as older versions did."""
    if not segments:
        segments = [(array("q"), array("Q"))]
    metadata = dpb.SnapshotMetadata()
    encoded: list[bytes] = []
    encode = encode_packed_segment if packed else _protobuf_segment
    for number, (ts_list, pos_list) in enumerate(segments):
        encoded.append(encode(ts_list, pos_list, cancels if number == 0 else []))
        meta = metadata.metadata_list.add(
            min_schedule_timestamp=ts_list[0] if ts_list else 0,
            max_schedule_timestamp=ts_list[-1] if ts_list else 0)
        for ledger_id, bitmap in segment_bitmaps(pos_list).items():
            bitmap.run_optimize()
            meta.delayed_index_bit_map[ledger_id] = bitmap.serialize()
    return metadata.SerializeToString(), encoded


def decode_metadata(data: bytes) -> list[SegmentInfo]:
    metadata = dpb.SnapshotMetadata.FromString(data)
    return [SegmentInfo(min_ts=m.min_schedule_timestamp, max_ts=m.max_schedule_timestamp,
                        bitmaps={ledger_id: BitMap.deserialize(raw)
                                 for ledger_id, raw in m.delayed_index_bit_map.items()})
            for m in metadata.metadata_list]


def is_packed_segment(data: bytes) -> bool:
    """Is this segment in the packed layout (decoded by a copy, no per-index work)?"""
    return data[:len(PACKED_MAGIC)] == PACKED_MAGIC


def _le_column(typecode: str, data: bytes | memoryview) -> array[int]:
    column = array(typecode)
    column.frombytes(data)
    if sys.byteorder != "little":
        column.byteswap()
    return column


def _decode_packed(data: bytes) -> DecodedSegment:
    if len(data) < _PACKED_HEAD:
        raise ValueError("packed delayed index segment: short header")
    n_cancels, n = _PACKED_COUNTS.unpack_from(data, len(PACKED_MAGIC))
    if len(data) != _PACKED_HEAD + 8 * (n_cancels + 2 * n):
        raise ValueError(f"packed delayed index segment: {len(data)} bytes for "
                         f"{n_cancels} cancels and {n} indexes")
    view = memoryview(data)
    at = _PACKED_HEAD
    cancels = _le_column("Q", view[at:at + 8 * n_cancels]).tolist()
    at += 8 * n_cancels
    ts_col = _le_column("q", view[at:at + 8 * n])
    at += 8 * n
    return DecodedSegment(ts_col, _le_column("Q", view[at:at + 8 * n]), cancels)


def decode_segment(data: bytes) -> DecodedSegment:
    """A segment of either layout (module docstring); bad bytes raise ``ValueError`` (packed)
    or protobuf's ``DecodeError``."""
    if is_packed_segment(data):
        return _decode_packed(data)
    segment = dpb.SnapshotSegment.FromString(data)
    ts_col: array[int] = array("q")
    pos_col: array[int] = array("Q")
    cancels: list[int] = []
    cancel_type = dpb.CANCEL
    for index in segment.indexes:
        packed = (index.ledger_id << POSITION_BITS) | index.entry_id
        if index.delayed_operation_type == cancel_type:
            cancels.append(packed)
        else:
            ts_col.append(index.timestamp)
            pos_col.append(packed)
    return DecodedSegment(ts_col, pos_col, cancels)


def raw_to_decoded(raw: RawSegment) -> DecodedSegment:
    """An in-memory segment (not yet persisted) in the loaded form (columns shared, read-only)."""
    return DecodedSegment(raw[0], raw[1], [])
