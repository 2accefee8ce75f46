"""bench/delayed_storage.py's peer side over the raw wire, against a real Horae broker (the same
frames and admin calls reach Pulsar in the benchmark; a JVM here would be slow): every message
confirmed, the ones not delayed delivered and acknowledged, the delayed ones held, the topic
trimmed and its kept bytes read from its stats (counts only; timing is never asserted)."""

from __future__ import annotations

import asyncio
import pathlib

from bench.brokers import start_horae
from bench.delayed_storage import message, run_pulsar


def test_peer_workload_counts_and_kept_bytes(tmp_path: pathlib.Path) -> None:
    messages, size = 2_000, 100
    with start_horae(tmp_path, fsync=False) as broker:
        r = asyncio.run(run_pulsar(broker, "every-10", lambda i: i % 10 == 0, messages, size))
    assert r["pending"] == 200
    assert r["pending_bytes"] == sum(len(message(i, size, True)) for i in range(0, messages, 10))
    kept = r["kept_bytes"]
    assert isinstance(kept, int) and kept >= r["pending_bytes"]
    assert r["kept_per_pending"] == round(kept / r["pending_bytes"], 2)
