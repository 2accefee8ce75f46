"""``horae-client perf produce|consume``: pulsar-perf's report lines, against a real Horae and,
when Java and Pulsar's jars are at hand, against Pulsar 4.0 standalone with the same columns."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys
from typing import Any

import pytest

from cli.client.perf import LatencyRecorder

ROOT = pathlib.Path(__file__).resolve().parents[2]
NUMBER = re.compile(r"-?\d+(\.\d+)?")


def perf(url: str, *args: str, timeout: float = 180.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cli.client.main", "--url", url, "perf", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def columns(line: str) -> str:
    """A report line with its figures blanked and its timestamp dropped: the column layout."""
    text = line.split(" INFO  ", 1)[1]
    return NUMBER.sub("#", re.sub(r"\s+", " ", text))


def report(stdout: str) -> dict[str, list[str]]:
    lines = [line for line in stdout.splitlines() if " INFO  " in line]
    kinds = ("Throughput produced:", "Throughput received:", "Aggregated throughput stats",
             "Aggregated latency stats")
    return {kind: [columns(line) for line in lines if kind in line] for kind in kinds}


PRODUCED = ("Throughput produced: # msg --- # msg/s --- # Mbit/s --- # MB/s --- failure # msg/s "
            "--- Latency: mean: # ms - med: # - #pct: # - #pct: # - #pct: # - #pct: # - Max: #")
AGGREGATED_LATENCY = ("Aggregated latency stats --- Latency: mean: # ms - med: # - #pct: # - "
                      "#pct: # - #pct: # - #pct: # - #pct: # - Max: #")


def run_produce(url: str, topic: str) -> dict[str, list[str]]:
    run = perf(url, "produce", topic, "-r", "400", "-m", "800", "-s", "200",
               "--report-interval", "0.5", "--warmup-time", "0")
    assert run.returncode == 0, run.stderr
    figures = report(run.stdout)
    assert figures["Throughput produced:"], run.stdout
    assert set(figures["Throughput produced:"]) == {PRODUCED}
    assert figures["Aggregated throughput stats"] == [
        "Aggregated throughput stats --- # records produced --- # msg/s --- # Mbit/s --- # MB/s"]
    assert figures["Aggregated latency stats"] == [AGGREGATED_LATENCY]
    assert "--- 800 records produced ---" in run.stdout
    return figures


def test_perf_produce_then_consume_report_as_pulsar_perf(broker: Any) -> None:
    run_produce(broker.service_url, "perf-t")
    got = perf(broker.service_url, "consume", "perf-t", "-sp", "Earliest", "-m", "800",
               "--report-interval", "0.5", "-s", "perf-sub")
    assert got.returncode == 0, got.stderr
    figures = report(got.stdout)
    assert "--- 800 records received ---" in got.stdout
    assert figures["Aggregated latency stats"] == [AGGREGATED_LATENCY]
    for line in figures["Throughput received:"]:
        assert line == ("Throughput received: # msg --- # msg/s --- # Mbit/s --- # MB/s --- "
                        "Latency: mean: # ms - med: # - #pct: # - #pct: # - #pct: # - #pct: # - "
                        "Max: #")


def test_recorder_figures() -> None:
    now = [100.0]
    recorder = LatencyRecorder(clock=lambda: now[0])
    for latency_ms in (1, 2, 3, 4, 100):
        recorder.record(1024 * 1024, latency_ms * 1000)
    recorder.fail()
    now[0] = 110.0
    line = recorder.interval_line("produced")
    assert "Throughput produced:       5 msg ---      0.5 msg/s ---      4.0 Mbit/s ---" in line
    assert "   0.500 MB/s --- failure      0.1 msg/s --- Latency: mean:  22.000 ms" in line
    assert "med:   3.001 -" in line and "Max: 100.031" in line
    assert "records" not in line
    throughput, latency = recorder.summary_lines("produced")
    assert throughput == ("Aggregated throughput stats --- 5 records produced --- 0.500 msg/s --- "
                          "4.000 Mbit/s --- 0.500 MB/s")
    assert "99.999pct: 100.031 - Max: 100.031" in latency
    # The interval restarts; the run's summary keeps everything.
    now[0] = 120.0
    assert "Throughput produced:       5 msg ---      0.0 msg/s" in recorder.interval_line(
        "produced")


@pytest.mark.slow
def test_perf_produce_prints_the_same_columns_against_pulsar_standalone(
        broker: Any, pulsar_standalone: Any) -> None:
    horae = run_produce(broker.service_url, "perf-same")
    apache = run_produce(pulsar_standalone.service_url, "perf-same")
    for kind in ("Aggregated throughput stats", "Aggregated latency stats"):
        assert horae[kind] == apache[kind]
    assert set(horae["Throughput produced:"]) == set(apache["Throughput produced:"]) == {PRODUCED}
