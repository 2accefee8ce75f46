"""bench/delayed_restart_broker.py on a small store of bench/delayed_restart.py: the real broker
process restarted on it hands the consumer every message due while it was down, none early,
none twice, no acknowledged one, and logs when its index serves."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
#: 20 ledgers of 1,000, one bucket each: the last one stays mutable (its entries read again
#: after the restart, each held until its deliver time)
SHAPE = ["--pending", "20000", "--ack-every", "10"]


def test_whole_broker_restart_counts(tmp_path: Path) -> None:
    store = tmp_path / "store"
    subprocess.run([sys.executable, str(BENCH / "delayed_restart.py"), *SHAPE,
                    "--per-bucket", "1000", "--per-ledger", "1000", "--store", str(store),
                    "--build-only"], check=True, capture_output=True, text=True, timeout=240)
    out = subprocess.run([sys.executable, str(BENCH / "delayed_restart_broker.py"), *SHAPE,
                          "--store", str(store), "--work", str(tmp_path / "work"),
                          "--after-s", "0", "--timeout-s", "120"],
                         check=True, capture_output=True, text=True, timeout=240).stdout
    line = out.strip().splitlines()[-1]
    r = json.loads(line[line.index("{"):])
    assert r["overdue"] > 0
    assert r["caught_up"] == r["overdue"]
    assert r["overdue_lost"] == 0
    assert r["catch_up_p99_ms"] is not None
    for key in ("early", "duplicate", "acked_received", "cancelled_received"):
        assert r[key] == 0, key
    # of the unsealed bucket's ledger (less its acknowledged tenth) only what fell due: the
    # first 1% of the hour was past at the start, a few seconds more by the end
    assert 0 < r["tail_received"] < 100
    assert r["index_serving_s"] is not None
    assert r["first_due_s"] <= r["first_overdue_s"] <= r["caught_up_s"]
    assert r["broker_warnings"] == []
    # the copy is deleted (its broker's log is kept beside)
    assert [p for p in (tmp_path / "work").iterdir() if p.is_dir()] == []
