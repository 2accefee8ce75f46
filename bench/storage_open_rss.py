"""Open a managed ledger of tens of millions of entries in bounded memory: RSS vs entries.

Run: .venv/bin/python bench/storage_open_rss.py [--sizes 1000000,10000000,50000000] [--dir PATH]

What it builds (synthetically, to save time and disk): one topic per size, in one store, with
sealed segments of 50,000 entries (managedLedgerMaxEntriesPerLedger's default) of 10-byte
payloads. Every sealed segment has its persisted index (``<id>.idx``, 12 bytes per entry:
600 MB for 50M entries) and a valid file header, and is a *sparse* file of the exact size its
records would take, except the first and the last segment of each topic, which hold real
records (so reads of them after the open are checked end to end). That is everything
``open_ledger`` reads of a sealed, indexed segment: the index (CRC-checked) and the segment's
header and size; record contents are only read (and CRC-checked) by reads. The last segment
has no index (it was the open ledger at a crash) and is scanned, as after a kill -9.

What it measures, for each size, in a fresh child process (so nothing the build allocated
counts): VmRSS after ``SegmentStore.open``, after ``open_ledger`` (recovery), and after
reading the first and the last 1,000 entries (which pages two indexes in), the process's peak
(VmHWM), and the open time. The per-entry index of sealed segments is paged by the
IndexPager (``index_cache_bytes``, 64 MiB) and none of it is kept resident at open, so RSS
should stay flat as the entry count grows (the old resident index cost 12 bytes per entry:
600 MB at 50M).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from array import array
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # before bench/ (storage.py)

from storage import Position, SegmentStore, StorageConfig
from storage.names import encode_name
from storage.segments import (
    FILE_HEADER_SIZE,
    FORMAT_V3,
    RECORD_HEADER_SIZE,
    encode_file_header,
    encode_index,
    encode_record_header,
    index_path,
    segment_name,
)

PER_SEGMENT = 50_000
PAYLOAD = 10
RECORD = RECORD_HEADER_SIZE + PAYLOAD
CREATED_MS = 1_700_000_000_000


def topic(entries: int) -> str:
    return f"persistent://bench/open-rss/t-{entries}"


def payload(ledger_id: int, entry_id: int) -> bytes:
    return f"{ledger_id % 100_000:05d}{entry_id % 100_000:05d}".encode()


def build(root: Path, entries: int, first_id: int) -> int:
    """Write one topic of `entries` entries starting at ledger id first_id; returns the next
    free ledger id."""
    directory = root / "ledgers" / encode_name(topic(entries))
    directory.mkdir(parents=True)
    (directory / "NAME").write_text(topic(entries))
    segments = -(-entries // PER_SEGMENT)
    for n in range(segments):
        ledger_id = first_id + n
        count = min(PER_SEGMENT, entries - n * PER_SEGMENT)
        size = FILE_HEADER_SIZE + count * RECORD
        path = directory / segment_name(ledger_id)
        header = encode_file_header(ledger_id, CREATED_MS)
        if n in (0, segments - 1):
            parts = [header]
            for i in range(count):
                data = payload(ledger_id, i)
                parts += (encode_record_header(i, data, ledger_id=ledger_id), data)
            path.write_bytes(b"".join(parts))
        else:
            with path.open("wb") as f:
                f.write(header)
                f.truncate(size)  # sparse: open never reads the records of an indexed segment
        if n == segments - 1:
            continue  # the open ledger at a crash: no index, scanned at open
        offsets = array("q", range(FILE_HEADER_SIZE, size, RECORD))
        lengths = array("i", [PAYLOAD]) * count
        index_path(path).write_bytes(encode_index(ledger_id, size, CREATED_MS, FORMAT_V3,
                                                  offsets, lengths, count * PAYLOAD))
    return first_id + segments


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


async def measure(root: Path, entries: int) -> dict[str, float]:
    """Child process: open the store and the topic; RSS at each step."""
    out: dict[str, float] = {"entries": entries, "rss_start": _status("VmRSS")}
    store = await SegmentStore.open(root, StorageConfig(mark_delete_rate_limit_per_sec=0))
    out["rss_store_open"] = _status("VmRSS")
    t0 = time.perf_counter()
    ml = await store.open_ledger(topic(entries))
    out["open_s"] = time.perf_counter() - t0
    out["rss_ledger_open"] = _status("VmRSS")
    out["paged_index_bytes_open"] = store.pager.resident_bytes
    assert ml.number_of_entries == entries, (ml.number_of_entries, entries)
    first = ml.first_position
    assert first is not None
    got = await ml.read_entries(Position(first.ledger_id, 0), 1000)
    assert [bytes(e.data) for e in got[:2]] == [payload(first.ledger_id, 0),
                                                payload(first.ledger_id, 1)], "bad read"
    last_ledger = max(info.ledger_id for info in ml.ledgers if info.entries > 0)
    tail = min(1000, PER_SEGMENT)
    last_count = next(info.entries for info in ml.ledgers if info.ledger_id == last_ledger)
    got = await ml.read_entries(Position(last_ledger, max(0, last_count - tail)), tail)
    assert bytes(got[-1].data) == payload(last_ledger, last_count - 1), "bad read"
    out["rss_after_reads"] = _status("VmRSS")
    out["paged_index_bytes"] = store.pager.resident_bytes
    await store.close()
    out["rss_peak"] = _status("VmHWM")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1000000,10000000,50000000",
                        help="comma-separated entry counts (one topic each)")
    parser.add_argument("--dir", type=Path, default=None, help="where to build (default: tmp)")
    parser.add_argument("--child", nargs=2, metavar=("ROOT", "ENTRIES"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        import uvloop

        result = uvloop.run(measure(Path(args.child[0]), int(args.child[1])))
        print(json.dumps(result))
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    base = Path(tempfile.mkdtemp(prefix="horae-open-rss-", dir=args.dir))
    try:
        root = base / "store"
        next_id = 0
        t0 = time.perf_counter()
        for entries in sizes:
            next_id = build(root, entries, next_id)
        print(f"built {sum(sizes):,} entries in {next_id:,} segments in "
              f"{time.perf_counter() - t0:.1f} s under {base}")
        print(f"{'entries':>12} {'open s':>7} {'RSS store':>10} {'RSS ledger':>11} "
              f"{'+open':>8} {'RSS reads':>10} {'peak':>8}  (MiB)")
        for entries in sizes:
            proc = subprocess.run([sys.executable, __file__, "--child", str(root), str(entries)],
                                  check=True, capture_output=True, text=True)
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            mib = 1 << 20
            print(f"{entries:>12,} {r['open_s']:>7.2f} {r['rss_store_open'] / mib:>10.1f} "
                  f"{r['rss_ledger_open'] / mib:>11.1f} "
                  f"{(r['rss_ledger_open'] - r['rss_store_open']) / mib:>8.1f} "
                  f"{r['rss_after_reads'] / mib:>10.1f} {r['rss_peak'] / mib:>8.1f}")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
