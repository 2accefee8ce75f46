"""Post-crash states of a recorded trace (see crashfs.py for how the harness works).

A state is the durable state at a crash point plus a choice over the volatile ops (in trace
order): all dropped ("drop_all", the most lossy: finds a missing sync at once), all kept
("keep_all": what a process crash leaves), a prefix kept ("prefix": an ordered journal), an
independent subset ("random": the volatile ops reordered), the same with writes torn at
512-byte sectors ("torn": a 4 KiB page half written), only file data or only directory
changes kept ("data_only", "dirs_only").

Crash points: the end of the trace, just after every mark (the instant a promise was made)
and just before every sync (the instant the most is volatile), then random ones.
Deterministic for a seed; HORAE_CRASH_STATES sets how many states a run checks.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from dataclasses import dataclass

from crashfs import FsState, Op, Replayer, Trace

SECTOR = 512
MODES = ("drop_all", "keep_all", "prefix", "random", "torn", "data_only", "dirs_only")
DEFAULT_STATES = 200


def states_budget(default: int = DEFAULT_STATES) -> int:
    """How many states to check: HORAE_CRASH_STATES (a long release run), else default."""
    return int(os.environ.get("HORAE_CRASH_STATES", str(default)))


@dataclass(slots=True)
class CrashState:
    point: int  # ops of the trace applied before the crash
    mode: str
    seed: int
    state: FsState
    volatile: int  # volatile ops at the crash point
    kept: int  # how many of them (torn ones included) this state kept

    def describe(self, trace: Trace) -> str:
        near = trace.ops[max(0, self.point - 6) : self.point]
        lines = [f"crash point {self.point}/{len(trace.ops)} mode={self.mode} seed={self.seed} "
                 f"volatile={self.volatile} kept={self.kept}; last ops:"]
        lines += [f"  {describe_op(op)}" for op in near]
        return "\n".join(lines)


def describe_op(op: Op) -> str:
    if op.kind == "mark":
        return f"mark {op.mark}"
    if op.kind in ("sync", "dsync"):
        return f"{op.kind} ino={op.ino if op.kind == 'sync' else op.dir} from {op.site}"
    if op.kind == "write":
        return f"write ino={op.ino} [{op.offset}, {op.offset + len(op.data)})"
    if op.kind == "rename":
        return f"rename ino={op.ino} {op.dir}/{op.name} -> {op.dir2}/{op.name2}"
    return f"{op.kind} ino={op.ino} dir={op.dir} name={op.name} off={op.offset}"


def interesting_points(trace: Trace) -> list[int]:
    points: set[int] = set()
    for i, op in enumerate(trace.ops):
        if op.kind == "mark":
            points.add(i + 1)
        elif op.kind in ("sync", "dsync"):
            points.add(i)
    points.add(len(trace.ops))
    return sorted(points)


def plan(trace: Trace, n: int, seed: int) -> list[tuple[int, str, int]]:
    """(crash point, mode, state seed) for n states: the end drop_all/keep_all first, then
    drop_all at interesting points, then random modes at random points, sorted by point."""
    rng = random.Random(seed)
    end = len(trace.ops)
    first = [(end, "drop_all", 0), (end, "keep_all", 0)][: max(0, n)]
    points = interesting_points(trace)
    rest: list[tuple[int, str, int]] = []
    budget = n - len(first)
    drop_points = points if len(points) <= budget // 2 else rng.sample(points, budget // 2)
    rest += [(p, "drop_all", 0) for p in drop_points]
    while len(rest) < budget:
        point = rng.choice(points) if rng.random() < 0.7 else rng.randrange(end + 1)
        rest.append((point, rng.choice(MODES[2:]), rng.randrange(1 << 30)))
    rest.sort()
    return first + rest


def generate(trace: Trace, n: int, seed: int) -> Iterator[CrashState]:
    """n post-crash states of trace (deterministic for a seed)."""
    replay = Replayer(trace)
    for point, mode, state_seed in plan(trace, n, seed):
        if point < replay.position:
            replay = Replayer(trace)
        replay.advance(point)
        volatile = replay.volatile_ops()
        state, kept = build(replay.durable, volatile, mode, random.Random(state_seed))
        yield CrashState(point, mode, state_seed, state, len(volatile), kept)


def build(durable: FsState, volatile: list[Op], mode: str, rng: random.Random
          ) -> tuple[FsState, int]:
    state = durable.copy()
    keep_upto = rng.randrange(len(volatile) + 1) if mode == "prefix" else 0
    kept = 0
    for i, op in enumerate(volatile):
        is_data = op.kind in ("write", "trunc")
        if mode == "drop_all":
            keep = False
        elif mode == "keep_all":
            keep = True
        elif mode == "prefix":
            keep = i < keep_upto
        elif mode == "data_only":
            keep = is_data
        elif mode == "dirs_only":
            keep = not is_data
        else:
            keep = rng.random() < 0.5
        if mode == "torn" and op.kind == "write" and rng.random() < 0.5:
            for piece in tear(op, rng):
                state.apply(piece)
            kept += 1
            continue
        if keep:
            state.apply(op)
            kept += 1
    return state, kept


def tear(op: Op, rng: random.Random) -> list[Op]:
    """The sectors of a write that made it to the disk (a random subset, 512-byte aligned
    on the file, so a 4 KiB page can be half old, half new)."""
    pieces: list[Op] = []
    start, end = op.offset, op.offset + len(op.data)
    at = start
    while at < end:
        nxt = min(end, (at // SECTOR + 1) * SECTOR)
        if rng.random() < 0.5:
            pieces.append(Op("write", ino=op.ino, offset=at,
                             data=op.data[at - start : nxt - start]))
        at = nxt
    return pieces
