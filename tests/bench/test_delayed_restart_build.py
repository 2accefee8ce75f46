"""The bulk store builder of bench/delayed_restart.py writes what the message-by-message path
writes: recovered after the kill, both stores hand out the same messages at the same clock
times, with the same counts (acknowledged and cancelled ones never), for each delay shape."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "delayed_restart.py"
BASE = 1_900_000_000_000
#: not a multiple of the bucket size: the last bucket stays mutable and partly filled
SHAPE = ["--pending", "3130", "--per-bucket", "100", "--ack-every", "10", "--cancel-every",
         "10"]


def _run(*args: str) -> str:
    return subprocess.run([sys.executable, str(SCRIPT), *args], check=True,
                          capture_output=True, text=True, timeout=240).stdout


def _build_and_recover(root: Path, delays: str, slow: bool) -> tuple[dict[str, object],
                                                                      list[list[int]]]:
    shape = [*SHAPE, "--delays", delays]
    _run(*shape, *(["--slow-build"] if slow else []), "--child", f"{root},0,{BASE}")
    log = root.parent / f"{root.name}.log.json"
    out = _run(*shape, "--log", str(log), "--child", f"{root},16,{BASE}")
    return json.loads(out.strip().splitlines()[-1]), json.loads(log.read_text())


@pytest.mark.parametrize("delays", ["hour", "fixed", "year"])
def test_bulk_store_recovers_as_the_slow_one(tmp_path: Path, delays: str) -> None:
    slow, slow_log = _build_and_recover(tmp_path / "slow", delays, slow=True)
    bulk, bulk_log = _build_and_recover(tmp_path / "bulk", delays, slow=False)
    # 31 buckets of 100 sealed (the 31st ledger's entries are the mutable bucket, in memory
    # only: re-read by a dispatcher after a restart, not by this recovery)
    sealed = 3100 - 310 - 310
    assert slow["drained"] and bulk["drained"]
    # the same messages at the same clock times; among those handed out at one time (the
    # catch-up of what fell due while down) the order follows which buckets came in first
    assert sorted(map(tuple, slow_log)) == sorted(map(tuple, bulk_log))
    for log in (slow_log, bulk_log):
        assert [t for _, t in log] == sorted(t for _, t in log)
    assert len(bulk_log) == sealed == bulk["handed_out"]
    for key in ("early", "lost", "duplicate", "acked_handed_out", "cancelled_handed_out"):
        assert slow[key] == bulk[key] == 0, key
    assert slow["catch_up_n"] == bulk["catch_up_n"] > 0
    handed = {i for i, _ in bulk_log}
    assert not any(i % 10 in (3, 8) for i in handed)
    assert max(handed) < 3100
