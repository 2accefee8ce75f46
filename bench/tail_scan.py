"""The recovery scan of an unsealed, unindexed segment: the Python reference and its C twin.

A broker restarted after a kill -9 scans the last segment of each ledger it opens record by
record, checking each record's CRC32C, before the ledger opens (``storage.segments.scan_segment``;
~50,000 records at the default ledger size, at every backlog). This times that scan in this
process on one segment file, best of ``--rounds``, CPU-s of this thread, with the in-order run
made and the zero tail's end found by ``storage.segments._scan_in_order`` and ``_data_end``
(the references) and by ``storage._scan_accel`` (the C twins) alternated, and checks that both
give the same index.

    .venv/bin/python bench/tail_scan.py [--records 50000] [--size 100] [--zeros 4194304] [--rounds 10]
    .venv/bin/python bench/tail_scan.py --segment STORE/ledgers/NAME/00000000000000003996.seg

``--segment`` scans a copy of a real segment (its ledger id read from the file name); without
it a format-3 segment of ``--records`` records of ``--size`` random bytes is written first,
followed by ``--zeros`` bytes of zeros (the pre-zeroed tail a writer keeps ahead: up to
``segment_prezero_bytes``, 4 MiB by default).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from storage import segments  # noqa: E402
from storage.fileops import FileOps  # noqa: E402
from storage.segments import (  # noqa: E402
    encode_file_header,
    encode_record_header,
    scan_segment,
)

LEDGER = 3996


def _write_segment(path: Path, records: int, size: int, ledger_id: int = LEDGER,
                   zeros: int = 64 * 1024) -> None:
    parts = [encode_file_header(ledger_id, int(time.time() * 1000))]
    for entry_id in range(records):
        data = os.urandom(size)
        parts += (encode_record_header(entry_id, data, ledger_id=ledger_id), data)
    parts.append(bytes(zeros))   # the pre-zeroed tail
    path.write_bytes(b"".join(parts))


def _scan_once(path: Path, ledger_id: int) -> tuple[float, tuple[object, ...]]:
    start = time.thread_time()
    result = scan_segment(FileOps(), path, ledger_id, truncate=False)
    spent = time.thread_time() - start
    return spent, (result.offsets.tobytes(), result.lengths.tobytes(), result.size_bytes,
                   result.valid_end, result.events)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--records", type=int, default=50_000)
    p.add_argument("--size", type=int, default=100, help="data bytes a record")
    p.add_argument("--zeros", type=int, default=4 * 1024 * 1024,
                   help="zeros after the records (the pre-zeroed tail)")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--segment", default="", help="scan a copy of this segment file")
    args = p.parse_args()
    if not segments.SCAN_ACCELERATED:
        sys.exit("storage._scan_accel is not built here (no C compiler at install)")
    runs = {"reference": (segments._scan_in_order, segments._data_end),
            "c": (segments._scan_run, segments._find_data_end)}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "tail.seg"
        if args.segment:
            shutil.copyfile(args.segment, path)
            ledger_id = int(Path(args.segment).name.split(".")[0])
        else:
            _write_segment(path, args.records, args.size, zeros=args.zeros)
            ledger_id = LEDGER
        best = {name: float("inf") for name in runs}
        found: dict[str, tuple[object, ...]] = {}
        for _ in range(args.rounds):
            for name, (run, find_end) in runs.items():
                segments._scan_run, segments._find_data_end = run, find_end
                spent, found[name] = _scan_once(path, ledger_id)
                best[name] = min(best[name], spent)
        segments._scan_run, segments._find_data_end = runs["c"]
        if found["reference"] != found["c"]:
            sys.exit("the two scans gave different indexes")
        entries = len(found["c"][0]) // 8   # type: ignore[arg-type]
        print(json.dumps({
            "segment": args.segment or f"{args.records} x {args.size} B + {args.zeros} zeros",
            "bytes": path.stat().st_size, "entries": entries, "rounds": args.rounds,
            "load": round(os.getloadavg()[0], 2),
            "reference_cpu_s": round(best["reference"], 4), "c_cpu_s": round(best["c"], 4),
            "reference_us_per_record": round(best["reference"] / max(entries, 1) * 1e6, 3),
            "c_us_per_record": round(best["c"] / max(entries, 1) * 1e6, 3),
            "ratio": round(best["reference"] / best["c"], 2) if best["c"] else None,
        }))


if __name__ == "__main__":
    main()
