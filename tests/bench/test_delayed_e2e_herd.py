"""bench/delayed_e2e.py's herd through the official client: every message of the herd counted
once, none early, on Horae and on a peer measured as Pulsar is (no write-latency histogram, no
event-loop thread to read), and the side-by-side table's ratios (counts only; timing is never
asserted)."""

from __future__ import annotations

import argparse
import pathlib

import pytest

from bench.brokers import start_horae
from bench.delayed_e2e import HerdTarget, herd_round, print_herd_side_by_side, run_herd

pytest.importorskip("pulsar", reason="the official Python client is not installed")

HERD = 1500


def _args() -> argparse.Namespace:
    return argparse.Namespace(herd=HERD, herd_consumers=1, herd_receiver_queue=1000,
                              herd_publish_rate=3000)


def test_herd_on_horae_and_on_a_peer_side_by_side(tmp_path: pathlib.Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    horae = run_herd(tmp_path, "in-memory", _args())
    assert (horae["received"], horae["early"], horae["failed"]) == (HERD, 0, 0)
    assert horae["peer"] == "horae in-memory" and horae["tracker"] == "in-memory"
    assert horae["all_delivered_s"] is not None and horae["all_delivered_s"] >= 0
    assert horae["broker_loop_cpu_us_per_message"] is not None
    assert horae["publish_herd_broker_count"] >= 0

    # a broker measured as the peer is: what only Horae exports is left out, not guessed
    (tmp_path / "peer").mkdir()
    with start_horae(tmp_path / "peer", fsync=False) as broker:
        peer = herd_round(HerdTarget("peer", broker.url, f"http://{broker.host}:{broker.web_port}",
                                     broker.pid, "persistent://public/default/peer-herd",
                                     horae=False), _args())
    assert (peer["received"], peer["early"], peer["failed"]) == (HERD, 0, 0)
    assert peer["broker_loop_cpu_us_per_message"] is None and peer["broker_loop_busy"] is None
    assert peer["publish_herd_broker_count"] == 0

    capsys.readouterr()
    print_herd_side_by_side([horae, peer])
    table = capsys.readouterr().out.strip().splitlines()
    assert table[0].startswith("| peer |") and len(table) == 4
    assert table[2].startswith("| horae in-memory | 1500 | 0 |")
    assert table[3].startswith("| peer | 1500 | 0 |")
    time_ratio, cpu_ratio = table[3].split("|")[-3:-1]
    assert time_ratio.strip().endswith("x")
    # a CPU ratio, or none when Horae's CPU for so small a herd was below the clock's tick
    assert cpu_ratio.strip().endswith("x") or (cpu_ratio.strip() == "-"
                                               and not horae["broker_cpu_us_per_message"])
