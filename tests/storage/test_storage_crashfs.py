"""Crash-state tests of the store on the crash-simulating file layer (crashfs*.py; how the
harness works is at the top of crashfs.py).

A scenario records main_workload on a fresh store (phase 1), then, just before some of its
append fdatasyncs, simulates a process crash (kill -9: the page cache survives, unsynced data
stays volatile) and a power loss (only durable data is left), and runs recovery_workload on
each (phase 2: recover, serve everything, append, flush). Every recorded trace is turned into post-crash states (power loss) and each
state is opened with the real store and checked (crashfs_check.check_state).

- test_every_crash_state_keeps_every_promise: HORAE_CRASH_STATES states (default 200) of
  the scenario; no state may break a promise.
- test_disabling_any_sync_site_loses_a_promise (teeth): for every fsync/fdatasync/directory
  fsync call site of storage/ the scenario reaches, the same scenario with that one site
  turned into a no-op must produce a losing state. Every site by default (about 0.5 s
  each, all of them ~8 s); HORAE_CRASH_SITES=N runs the append fdatasync plus a seeded
  sample of N-1 others.
  Sites whose sync no promise depends on are listed in NEUTRAL_SITES with the reason.
Long release run (about 90 s here): HORAE_CRASH_STATES=5000 pytest tests/storage/test_storage_crashfs.py;
HORAE_CRASH_SEED=N picks other crash points and state choices (the default seed is fixed).
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from crashfs import CrashFS, Trace, materialize
from crashfs_check import (
    TA,
    WORKLOAD_CONFIG,
    Workload,
    check_state,
    main_workload,
    record,
    recovery_workload,
)
from crashfs_states import generate, states_budget

from storage import PersistenceError, StorageConfig

SEED = int(os.environ.get("HORAE_CRASH_SEED", "20240611"))
KILL_POINTS = 3
# The sync stage's one fdatasync per file and round (storage/sync_stage.py): it covers the
# group commits written since the last one AND any pre-zero step's zeros (a pre-zero step has
# no sync site of its own any more), so disabling it disables both.
APPEND_SYNC = "sync_stage.py:_sync_file>"

NEUTRAL_SITES = {
    "store.py:_prepare_root>mkdir>fsync_dir": "creating a store always writes LEDGER_ID "
    "right after these directories, and that atomic write's directory fsync of the root "
    "makes the new directory entries durable too",
    "recovery.py:load_ledger_dir>fsync_dir": "it makes the removal of a segment with a torn "
    "header (nothing in it was ever acknowledged) durable; if the removal is lost, the next "
    "open finds the same torn header and removes it again",
    "segments.py:write_index>": "an index that lost its bytes fails its CRC or size checks "
    "and the segment is scanned instead (a slower open, nothing lost)",
}


@dataclass(slots=True)
class Finding:
    run: str
    state: str
    problems: list[str]


def _next_seqs(marks: list[tuple[Any, ...]]) -> dict[str, int]:
    seqs: dict[str, int] = {}
    for m in marks:
        if m[0] == "sent":
            topic, seq = str(m[1]), int(m[2])
            seqs[topic] = max(seqs.get(topic, 0), seq + 1)
    return seqs


def kill_points(trace: Trace, count: int, seed: int) -> list[int]:
    """Points just before an append's fdatasync (its records written, not yet synced)."""
    points = [i for i, op in enumerate(trace.ops) if op.kind == "sync" and op.site == APPEND_SYNC]
    if len(points) <= count:
        return points
    return sorted(random.Random(seed).sample(points, count))


async def run_scenario(
    work: Path, *, states: int, seed: int = SEED, kills: int = KILL_POINTS,
    disabled_site: str | None = None, config: StorageConfig = WORKLOAD_CONFIG,
    stop_first: bool = False, workload: Callable[[Workload], Awaitable[None]] = main_workload,
) -> tuple[list[Finding], dict[str, int]]:
    """Record the scenario and check `states` post-crash states of it. Returns the
    findings and the sync call sites the recording reached (with call counts)."""
    fs1 = await record(work / "p1", workload,
                       fs=CrashFS(work / "p1", disabled_site=disabled_site), config=config)
    sites = dict(fs1.sites)
    runs: list[tuple[str, Trace, list[tuple[Any, ...]]]] = [("phase1", fs1.trace, [])]
    for p in kill_points(fs1.trace, kills, seed):
        before = fs1.trace.marks(p)
        for power_loss in (False, True):
            how = "power loss" if power_loss else "kill"
            root = work / f"p2-{p}-{how.replace(' ', '-')}"
            fs2 = CrashFS.resume(root, fs1.trace, p, power_loss=power_loss,
                                 disabled_site=disabled_site)
            await record(root, recovery_workload, fs=fs2, config=config,
                         seqs=_next_seqs(before))
            for site, n in fs2.sites.items():
                sites[site] = sites.get(site, 0) + n
            runs.append((f"{how} at op {p}, then recovery", fs2.trace, before))
    findings: list[Finding] = []
    scratch = Path(tempfile.mkdtemp(prefix="horae-crashfs-", dir=_fast_tmp()))
    try:
        await _check_runs(runs, states, seed, scratch, stop_first, findings)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return findings, sites


def _fast_tmp() -> str | None:
    """States are written and opened (SQLite syncs) by the hundred: tmpfs when there is one."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None


async def _check_runs(
    runs: list[tuple[str, Trace, list[tuple[Any, ...]]]], states: int, seed: int, work: Path,
    stop_first: bool, findings: list[Finding],
) -> None:
    share = max(1, states // 2 // max(1, len(runs) - 1)) if states else 0
    per_run = [states // 2] + [share] * (len(runs) - 1)
    count = 0
    for (label, trace, before), budget in zip(runs, per_run, strict=True):
        for cs in generate(trace, budget, seed):
            target = work / f"state-{count}"
            count += 1
            materialize(cs.state, target)
            problems = await check_state(target, before + trace.marks(cs.point))
            shutil.rmtree(target)
            if problems:
                findings.append(Finding(label, cs.describe(trace), problems))
                if stop_first:
                    return


def _report(findings: list[Finding], limit: int = 3) -> str:
    return "\n\n".join(f"[{f.run}] {f.state}\n  " + "\n  ".join(f.problems)
                       for f in findings[:limit])


async def test_every_crash_state_keeps_every_promise(tmp_path: Path) -> None:
    findings, sites = await run_scenario(tmp_path, states=states_budget())
    assert not findings, _report(findings)
    assert sites.get(APPEND_SYNC), "the scenario made no durable append"
    assert any(s.startswith("segments.py:scan_segment") for s in sites), \
        "the recovery phase never synced a recovered segment"


async def test_sliced_group_commits_keep_every_promise(tmp_path: Path) -> None:
    """Every batch written one record per slice, each slice's fdatasync started while the
    next is written (group_commit_early_sync_bytes): crashes between slices lose nothing
    acknowledged."""
    config = replace(WORKLOAD_CONFIG, group_commit_early_sync_bytes=1)
    findings, sites = await run_scenario(tmp_path, states=max(1, states_budget() // 2),
                                         config=config)
    assert not findings, _report(findings)
    assert sites.get(APPEND_SYNC), "the scenario made no durable append"


def _sites_to_mutate(sites: list[str]) -> list[str]:
    wanted = os.environ.get("HORAE_CRASH_SITES", "all")
    if wanted == "all" or int(wanted) >= len(sites):
        return sites
    # Always the append fdatasync (the most important one), then a seeded sample.
    rest = [s for s in sites if s != APPEND_SYNC]
    return [APPEND_SYNC, *random.Random(SEED).sample(rest, max(0, int(wanted) - 1))]


async def test_disabling_any_sync_site_loses_a_promise(tmp_path: Path) -> None:
    _, sites = await run_scenario(tmp_path / "discover", states=0)
    mutable = sorted(s for s in sites if s not in NEUTRAL_SITES)
    assert APPEND_SYNC in mutable
    undetected: list[str] = []
    for i, site in enumerate(_sites_to_mutate(mutable)):
        findings, reached = await run_scenario(
            tmp_path / f"site-{i}", states=states_budget(), disabled_site=site, stop_first=True,
        )
        assert reached.get(site), f"{site} was not reached with it disabled"
        if not findings:
            undetected.append(site)
    assert not undetected, f"disabling these sync sites broke no promise: {undetected}"


async def test_neutral_sites_are_still_called(tmp_path: Path) -> None:
    """NEUTRAL_SITES must name real call sites (a renamed function must not hide one)."""
    _, sites = await run_scenario(tmp_path, states=0)
    assert set(NEUTRAL_SITES) <= set(sites), sorted(sites)


async def _one_big_batch(w: Workload) -> None:
    """One group commit larger than the pre-zeroed region: the segment file ends exactly
    where its last record ends (as every segment does with pre-zeroing off)."""
    ml = await w.store.open_ledger(TA)
    await w.append(ml, 30)


async def test_recovery_syncs_what_it_serves(tmp_path: Path) -> None:
    findings, _ = await run_scenario(tmp_path, states=60, kills=3, workload=_one_big_batch)
    assert not findings, _report(findings, 1)


async def _flush_races_cursor_delete(w: Workload) -> None:
    """flush_cursors() is saving one dirty cursor while another dirty one is deleted."""
    ml = await w.store.open_ledger(TA)
    await w.open_cursor(ml, "first")
    await w.open_cursor(ml, "doomed")
    positions = await w.append(ml, 4)
    ml.cursors["first"].delete(positions[:2])
    ml.cursors["doomed"].delete(positions[:2])
    flushing = asyncio.ensure_future(ml.flush_cursors())
    await asyncio.sleep(0)  # flush_cursors has taken its list of cursors and is saving "first"
    w.fs.mark("cursor_delete_start", TA, "doomed")
    await ml.delete_cursor("doomed")
    w.fs.mark("cursor_deleted", TA, "doomed")
    await flushing


async def test_deleted_cursor_stays_deleted_when_a_flush_races(tmp_path: Path) -> None:
    findings, _ = await run_scenario(tmp_path, states=20, kills=0,
                                     workload=_flush_races_cursor_delete)
    assert not findings, _report(findings, 1)


async def _fdatasync_fails_then_reopen(w: Workload) -> None:
    """An append's fdatasync fails (EIO); the fenced ledger is closed and opened again (as
    the broker does), and everything it then serves must be durable."""
    ml = await w.store.open_ledger(TA)
    await w.append(ml, 3)
    w.fs.fail_next_sync(APPEND_SYNC)
    with pytest.raises(PersistenceError):
        await w.append(ml, 2)
    assert ml.fenced
    await ml.close()
    ml = await w.store.open_ledger(TA)
    await w.serve_all(ml)
    await w.append(ml, 2)


async def test_records_whose_fdatasync_failed_are_never_served(tmp_path: Path) -> None:
    findings, _ = await run_scenario(tmp_path, states=40, kills=0,
                                     workload=_fdatasync_fails_then_reopen)
    assert not findings, _report(findings, 1)
