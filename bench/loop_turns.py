"""How long the broker's event loop turns take, measured inside the broker process.

Theory of operation
-------------------
A PING's round trip (``bench/loop_stall.py``) shows a stall as a client sees it, stretched by
whatever else the machine runs. This probe reads the turns themselves: a callback that puts
itself back with ``call_soon`` runs once per turn of the loop, so the time between two of its
runs is one whole turn: the wall time and the loop thread's CPU time (``time.thread_time``),
which another process on the machine cannot stretch. A turn shorter than ``MIN_TURN_MS`` is an
idle loop: the probe then sleeps ``REST_S`` before measuring again (a loop with nothing to do is
not kept spinning), so the turns of an idle loop are sampled, those of a busy one all measured. Full and young garbage collections are recorded with their CPU time too.

It is loaded into a ``horae serve`` process started with ``PYTHONPATH`` set to
``bench/probes_site`` and ``HORAE_LOOP_TURNS`` set to a file: ``uvloop.run`` is wrapped so
the probe starts on the broker's loop, and the records are written to that file when the
process exits. :func:`summary` reads them back for a window of epoch ms (e.g. the due window
of ``bench/delayed_e2e.py --loop-turns``).
"""

from __future__ import annotations

import asyncio
import atexit
import gc
import json
import statistics
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

__all__ = ["ENV", "SITE_DIR", "install", "summary"]

ENV = "HORAE_LOOP_TURNS"
SITE_DIR = Path(__file__).resolve().parent / "probes_site"
#: A turn shorter than this (ms) is an idle loop: the probe rests ``REST_S`` (uvloop's timers
#: count whole ms) and measures again; turns of a busy loop are measured one after another.
MIN_TURN_MS = 0.2
REST_S = 0.001


def _start_probe(turns: list[tuple[float, float, float]]) -> None:
    loop = asyncio.get_running_loop()
    wall, cpu = time.perf_counter, time.thread_time
    last = [wall(), cpu()]

    def tick() -> None:
        w, c = wall(), cpu()
        turn_ms = (w - last[0]) * 1000
        if turn_ms >= MIN_TURN_MS:
            turns.append((time.time_ns() / 1e6, turn_ms, (c - last[1]) * 1000))
            last[0], last[1] = w, c
            loop.call_soon(tick)
        else:
            loop.call_later(REST_S, restart)

    def restart() -> None:
        last[0], last[1] = wall(), cpu()
        loop.call_soon(tick)

    loop.call_soon(tick)


def install(path: str) -> None:
    """Record this process's loop turns and collections; write them to *path* at exit."""
    import uvloop

    turns: list[tuple[float, float, float]] = []
    collections: list[tuple[float, int, float, float]] = []
    started = [0.0, 0.0]

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started[0], started[1] = time.perf_counter(), time.thread_time()
        else:
            collections.append((time.time_ns() / 1e6, int(info["generation"]),
                                (time.perf_counter() - started[0]) * 1000,
                                (time.thread_time() - started[1]) * 1000))

    gc.callbacks.append(on_gc)
    run = uvloop.run

    def probed_run(main: Coroutine[Any, Any, Any], **kw: Any) -> Any:
        async def with_probe() -> Any:
            _start_probe(turns)
            return await main
        return run(with_probe(), **kw)

    uvloop.run = probed_run   # type: ignore[assignment]

    def dump() -> None:
        Path(path).write_text(json.dumps({"turns": turns, "gc": collections}))

    atexit.register(dump)


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q / 100 * len(s)) - 1))] if s else 0.0


def summary(path: Path, from_ms: float, to_ms: float, messages: int) -> dict[str, Any]:
    """The turns and collections recorded in *path* between the two epoch ms."""
    data = json.loads(path.read_text())
    turns = [t for t in data["turns"] if from_ms <= t[0] <= to_ms]
    walls = [t[1] for t in turns]
    cpus = [t[2] for t in turns]
    in_window = [g for g in data["gc"] if from_ms <= g[0] <= to_ms]
    return {
        "turns": len(turns),
        "turn_cpu_ms": {"p50": round(_pct(cpus, 50), 2), "p99": round(_pct(cpus, 99), 2),
                        "p999": round(_pct(cpus, 99.9), 2), "max": round(max(cpus, default=0), 2)},
        "turn_wall_ms": {"p50": round(_pct(walls, 50), 2), "p99": round(_pct(walls, 99), 2),
                         "p999": round(_pct(walls, 99.9), 2),
                         "max": round(max(walls, default=0), 2)},
        "turns_cpu_over_ms": {str(ms): sum(1 for c in cpus if c > ms) for ms in (2, 4, 6)},
        "loop_cpu_us_per_message": round(sum(cpus) * 1000 / max(1, messages), 1),
        "full_collections_cpu_ms": [round(g[3], 2) for g in in_window if g[1] == 2],
        "collections_cpu_ms": round(sum(g[3] for g in in_window), 1),
        "mean_turn_cpu_ms": round(statistics.fmean(cpus), 3) if cpus else 0.0,
    }
