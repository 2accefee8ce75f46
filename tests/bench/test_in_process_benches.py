"""The in-process benchmarks build the broker's parts around fakes of their own (a topic, a
subscription's delayed side); when a part starts asking its owner for something new, the fake
falls behind and the benchmark stops running. These runs keep them in step with the code,
with sizes small enough for CI; the figures are never asserted, only what each run checks."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from bench.delayed import run_handout
from bench.delayed_rebuild import run as rebuild_run

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("mode", ["herd", "backlog", "single"])
def test_dispatch_path_runs_every_mode(mode: str) -> None:
    # the script asserts every entry was held (herd), sent and acknowledged
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "dispatch_path.py"), "--messages", "300",
         "--consumers", "2", "--rounds", "1", "--mode", mode],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = proc.stdout.strip().splitlines()[-1]
    assert summary.startswith(f"{mode} 300 x 100 B, 2 consumers: dispatch "), summary


def test_dispatch_path_reads_a_herd_from_disk() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "dispatch_path.py"), "--messages", "300",
         "--rounds", "1", "--mode", "herd", "--from-disk"],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().endswith("the herd read from disk"), proc.stdout[-500:]


def test_delayed_rebuild_restores_every_key() -> None:
    # 1,000 keyed entries over 100 keys, the last 10 after the schedule snapshot
    result = asyncio.run(rebuild_run(1000, 100, 0.01))
    assert result["tail"] == 10
    assert result["full"]["keys"] == 100
    assert result["snapshot"]["keys"] == 100
    assert result["snapshot"]["read"] == 10     # only what the snapshot does not cover
    assert result["full"]["read"] > result["snapshot"]["read"]


@pytest.mark.parametrize("step_ms", [1, 40])
def test_delayed_handout_hands_out_every_message(step_ms: int) -> None:
    # two sealed buckets of 600 and 300 in the mutable one, due over half a second; the run
    # checks that every one was handed out once
    result = asyncio.run(run_handout(2, step_ms, 100, per_bucket=600, span_ms=500))
    assert result["buckets"] == 2
    assert result["handed_out"] == 1500
