"""Nothing unsynced is served: synced offsets, cut-back of fenced segments, recovery syncs,
and record checksums that cover the segment's ledger id."""

from __future__ import annotations

import asyncio
import errno
import os
import struct
from collections.abc import Sequence
from pathlib import Path

import pytest
from crc32c import crc32c
from storage_testlib import FaultyFileOps, copy_store, ledger_dir, segment_paths, write_segment

from storage import PersistenceError, Position, SegmentStore, StorageConfig
from storage.fileops import FileOps
from storage.segments import (
    FORMAT_V2,
    RECORD_HEADER_SIZE,
    SEGMENT_MAGIC_V2,
    read_records,
    record_crc,
    scan_segment,
    segment_name,
)

TOPIC = "persistent://public/default/synced"


async def test_records_whose_fsync_failed_are_not_served_after_reopen(tmp_path: Path) -> None:
    ops = FaultyFileOps()
    store = await SegmentStore.open(tmp_path, StorageConfig(), file_ops=ops)
    ml = await store.open_ledger(TOPIC)
    good = await asyncio.gather(*(ml.append(b"good%d" % i) for i in range(5)))
    ops.fail_fdatasync = True
    bad = await asyncio.gather(*(ml.append(b"bad%d" % i) for i in range(5)),
                               return_exceptions=True)
    assert all(isinstance(r, PersistenceError) for r in bad)
    ops.fail_fdatasync = False
    await ml.close()  # the broker unloads a fenced topic and loads it again
    ml = await store.open_ledger(TOPIC)
    got = await ml.read_entries(good[0], 100)
    assert [e.data for e in got] == [b"good%d" % i for i in range(5)]
    assert ml.last_confirmed == good[-1]
    await store.close()
    # And after a restart too (the cut-back was synced when the segment was sealed).
    store = await SegmentStore.open(tmp_path)
    ml = await store.open_ledger(TOPIC)
    got = await ml.read_entries(good[0], 100)
    assert [e.data for e in got] == [b"good%d" % i for i in range(5)]
    await store.close()


class _FailSecondSegmentWrite(FileOps):
    """writev fails from the n-th call on (to fail the second segment of a group commit)."""

    def __init__(self) -> None:
        self.writev_calls = 0
        self.fail_from: int | None = None

    def writev(self, fd: int, buffers: Sequence[bytes | memoryview]) -> int:
        self.writev_calls += 1
        if self.fail_from is not None and self.writev_calls >= self.fail_from:
            raise OSError(errno.EIO, "injected EIO (writev)")
        return super().writev(fd, buffers)


async def test_rollover_inside_a_failing_batch_indexes_no_unsynced_records(
    tmp_path: Path,
) -> None:
    ops = _FailSecondSegmentWrite()
    store = await SegmentStore.open(tmp_path, StorageConfig(max_entries_per_ledger=5),
                                    file_ops=ops)
    ml = await store.open_ledger(TOPIC)
    first = await asyncio.gather(*(ml.append(b"a%d" % i) for i in range(2)))
    ops.fail_from = ops.writev_calls + 2  # this batch: ledger A's write passes, B's fails
    batch = [ml.append(b"b%d" % i) for i in range(8)]  # one loop iteration: rolls over at 5
    results = await asyncio.gather(*batch, return_exceptions=True)
    assert all(isinstance(r, PersistenceError) for r in results)
    ops.fail_from = None
    ledger_a = first[0].ledger_id
    await ml.close()
    # A's last records were written but never synced: no index may describe them ...
    assert not (ledger_dir(tmp_path, TOPIC) / segment_name(ledger_a)).with_suffix(".idx").exists()
    ml = await store.open_ledger(TOPIC)
    got = await ml.read_entries(Position(ledger_a, 0), 100)
    # ... and a reopen serves only what was acknowledged.
    assert [e.data for e in got] == [b"a0", b"a1"]
    await store.close()


class _RecordingOps(FileOps):
    def __init__(self) -> None:
        self.paths: dict[int, Path] = {}
        self.synced: list[Path] = []

    def open(self, path: Path, flags: int, mode: int = 0o644) -> int:
        fd = super().open(path, flags, mode)
        self.paths[fd] = Path(path)
        return fd

    def fdatasync(self, fd: int) -> None:
        self.synced.append(self.paths[fd])
        super().fdatasync(fd)

    def fsync(self, fd: int) -> None:
        self.synced.append(self.paths[fd])
        super().fsync(fd)


async def test_recovered_open_segment_is_synced_before_it_is_served(tmp_path: Path) -> None:
    # No pre-zeroed tail: the segment ends at its last record, so recovery cuts nothing.
    store = await SegmentStore.open(tmp_path / "live", StorageConfig(segment_prezero_bytes=0))
    ml = await store.open_ledger(TOPIC)
    positions = await asyncio.gather(*(ml.append(b"e%d" % i) for i in range(10)))
    crashed = copy_store(tmp_path / "live", tmp_path / "crashed")  # as kill -9 leaves it
    await store.close()
    (crashed / "LOCK").unlink()
    ops = _RecordingOps()
    store = await SegmentStore.open(crashed, file_ops=ops)
    ml = await store.open_ledger(TOPIC)
    open_segment = ledger_dir(crashed, TOPIC) / segment_name(positions[0].ledger_id)
    assert open_segment in ops.synced  # synced during recovery, before any read
    got = await ml.read_entries(positions[0], 100)
    assert [e.data for e in got] == [b"e%d" % i for i in range(10)]
    await store.close()


def test_a_record_of_another_ledger_never_passes_as_this_ledgers(tmp_path: Path) -> None:
    # Ledger 8's segment holds a stale block: ledger 7's record 3, at record 3's place.
    payloads = [b"rec%d" % i + bytes(40) for i in range(8)]
    other = write_segment(tmp_path / "other", 7, payloads)
    path = write_segment(tmp_path, 8, [p.replace(b"rec", b"REC") for p in payloads])
    offset = 32 + 3 * (RECORD_HEADER_SIZE + len(payloads[0]))
    size = RECORD_HEADER_SIZE + len(payloads[3])
    with other.open("rb") as f:
        f.seek(offset)
        stale = f.read(size)
    with path.open("r+b") as f:
        f.seek(offset)
        f.write(stale)
    result = scan_segment(FileOps(), path, 8)
    assert result.offsets[3] == -1  # dropped, not accepted
    assert [e[0] for e in result.events] == ["corrupt_record"]
    wanted = [(i, result.offsets[i], result.lengths[i]) for i in range(8) if i != 3]
    got = read_records(FileOps(), path, wanted, result.format, 8)
    assert all(data is not None and data.startswith(b"REC") for _, data in got)


def _write_segment_v2(directory: Path, ledger_id: int, payloads: list[bytes]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    head = struct.pack("<8sQQI", SEGMENT_MAGIC_V2, ledger_id, 0, 0)
    parts = [head, struct.pack("<I", crc32c(head))]
    for entry_id, data in enumerate(payloads):
        stored = len(data) + RECORD_HEADER_SIZE
        parts += [struct.pack("<IIQ", stored, record_crc(stored, entry_id, data), entry_id), data]
    path = directory / segment_name(ledger_id)
    path.write_bytes(b"".join(parts))
    return path


async def test_format_2_segments_are_still_read(tmp_path: Path) -> None:
    directory = ledger_dir(tmp_path, TOPIC)
    path = _write_segment_v2(directory, 0, [b"old", b"", b"format two" * 5])
    (directory / "NAME").write_text(TOPIC)
    assert scan_segment(FileOps(), path, 0, truncate=False).format == FORMAT_V2
    store = await SegmentStore.open(tmp_path)
    ml = await store.open_ledger(TOPIC)
    got = await ml.read_entries(Position(0, 0), 10)
    assert [e.data for e in got] == [b"old", b"", b"format two" * 5]
    assert store.recovery_report.events == ()
    new = await ml.append(b"new")  # written as format 3 in a new segment
    assert [p.name for p in segment_paths(tmp_path, TOPIC)][-1] == segment_name(new.ledger_id)
    await store.close()


@pytest.mark.parametrize("fail", ["fdatasync", "writev"])
async def test_fenced_segment_is_cut_back_to_its_synced_end_on_disk(
    tmp_path: Path, fail: str
) -> None:
    ops = FaultyFileOps()
    store = await SegmentStore.open(tmp_path, StorageConfig(), file_ops=ops)
    ml = await store.open_ledger(TOPIC)
    good = await asyncio.gather(*(ml.append(b"x" * 100) for _ in range(3)))
    path = segment_paths(tmp_path, TOPIC)[-1]
    setattr(ops, f"fail_{fail}", True)
    with pytest.raises(PersistenceError):
        await ml.append(b"y" * 100)
    setattr(ops, f"fail_{fail}", False)
    await ml.close()
    assert good[-1].entry_id == 2
    assert os.stat(path).st_size == 32 + 3 * (RECORD_HEADER_SIZE + 100)
    await store.close()
