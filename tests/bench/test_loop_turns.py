"""The loop-turn probe of bench/loop_turns.py sees a long turn with its CPU time, and the
summary picks the turns of a window."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import uvloop

from bench import loop_turns


def _spin(cpu_s: float) -> None:
    end = time.thread_time() + cpu_s
    while time.thread_time() < end:
        pass


def test_a_long_turn_is_recorded_with_its_cpu_time(tmp_path: Path) -> None:
    async def main() -> list[tuple[float, float, float]]:
        turns: list[tuple[float, float, float]] = []
        loop_turns._start_probe(turns)
        for n in range(40):   # a busy loop: turns of 0.5 ms of CPU, one of them 8 ms
            await asyncio.sleep(0)
            _spin(0.008 if n == 20 else 0.0005)
        return turns

    turns = uvloop.run(main())
    assert any(cpu >= 8.0 and wall >= cpu - 0.5 for _, wall, cpu in turns)
    path = tmp_path / "turns.json"
    path.write_text(json.dumps({"turns": turns, "gc": [[turns[-1][0], 2, 1.0, 0.5]]}))
    got = loop_turns.summary(path, turns[0][0], turns[-1][0], messages=10)
    assert got["turns"] == len(turns) and got["turn_cpu_ms"]["max"] >= 8.0
    assert got["turns_cpu_over_ms"]["6"] >= 1 and got["full_collections_cpu_ms"] == [0.5]
    assert loop_turns.summary(path, 0, 1, messages=10)["turns"] == 0
