"""bench/tail_scan.py runs both scans on a written segment and on a copy of a given one, and
prints their figures only when both gave the same index."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytest.importorskip("storage._scan_accel", reason="built without a C compiler")


def _run(*args: str) -> dict[str, object]:
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "tail_scan.py"), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def test_a_written_segment_is_scanned_alike_by_both(tmp_path: Path) -> None:
    out = _run("--records", "3000", "--size", "40", "--rounds", "1")
    assert out["entries"] == 3000
    assert isinstance(out["c_cpu_s"], float) and isinstance(out["reference_cpu_s"], float)


def test_a_given_segment_is_scanned_from_a_copy(tmp_path: Path) -> None:
    from bench.tail_scan import _write_segment

    segment = tmp_path / "00000000000000000012.seg"
    _write_segment(segment, 500, 10, ledger_id=12)
    before = segment.read_bytes()
    out = _run("--segment", str(segment), "--rounds", "1")
    assert out["entries"] == 500
    assert segment.read_bytes() == before
