"""The transaction log, topic buffer and pending acks keep their promises in every sampled
post-crash state: a commit that was answered is visible and its acks applied, an abort never
shows a message nor applies an ack, and a transaction caught between the phases is all or
nothing (how the harness works: crashfs.py; the workload and checks: crashfs_transactions.py).

HORAE_CRASH_STATES sets how many states are checked (default here 120); HORAE_CRASH_SEED
picks other states.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from crashfs import CrashFS, Trace, materialize
from crashfs_check import WORKLOAD_CONFIG, check_state, record
from crashfs_states import generate, states_budget
from crashfs_transactions import check_transactions, transaction_workload

from broker.transactions.log_batch import RecordBatcher
from storage.positions import Position

SEED = int(os.environ.get("HORAE_CRASH_SEED", "20240611"))
STATES = 120
APPEND_SYNC = "sync_stage.py:_sync_file>"


async def _check(trace: Trace, budget: int, *, stop_first: bool = False) -> tuple[list[str], int]:
    findings: list[str] = []
    checked = 0
    shm = "/dev/shm"
    scratch = Path(tempfile.mkdtemp(prefix="horae-crashfs-txn-", dir=shm if os.access(
        shm, os.W_OK) else None))
    try:
        for cs in generate(trace, budget, SEED):
            target = scratch / f"state-{checked}"
            checked += 1
            materialize(cs.state, target)
            marks: list[tuple[Any, ...]] = trace.marks(cs.point)
            problems = await check_state(target, marks)
            problems += await check_transactions(target, marks)
            shutil.rmtree(target)
            if problems:
                findings.append(cs.describe(trace) + "\n  " + "\n  ".join(problems))
                if stop_first:
                    break
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return findings, checked


async def test_transactions_keep_every_promise_in_every_crash_state(tmp_path: Path) -> None:
    fs = await record(tmp_path / "p1", transaction_workload, fs=CrashFS(tmp_path / "p1"),
                      config=WORKLOAD_CONFIG)
    kinds = {op.mark[0] for op in fs.trace.ops if op.kind == "mark"}
    assert {"txn_entry", "txn_ack", "txn_end_start", "txn_ended", "txn_group"} <= kinds, kinds
    (log_state,) = [op.mark for op in fs.trace.ops if op.kind == "mark" and op.mark[0] == "txn_log"]
    assert log_state[1] > 0 and 0 < log_state[2] <= 2, \
        f"the log was not trimmed: {log_state}"   # checkpoints carried it across trims
    findings, checked = await _check(fs.trace, states_budget(STATES))
    assert not findings, "\n\n".join(findings[:3])
    assert checked == states_budget(STATES)


async def test_without_the_append_fsync_a_transaction_promise_breaks(tmp_path: Path) -> None:
    """Teeth: the log and the markers rest on the ledger's append fdatasync."""
    fs = await record(tmp_path / "p1", transaction_workload,
                      fs=CrashFS(tmp_path / "p1", disabled_site=APPEND_SYNC),
                      config=WORKLOAD_CONFIG)
    assert fs.sites.get(APPEND_SYNC), f"{APPEND_SYNC} was not reached"
    findings, _ = await _check(fs.trace, states_budget(STATES), stop_first=True)
    assert findings, "disabling the append fdatasync broke no transaction promise"


async def test_answering_a_group_that_is_not_durable_breaks_a_promise(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Teeth of the group check: a group is answered but its entry never reaches the disk."""
    issue = RecordBatcher._issue

    def answer_unwritten(self: RecordBatcher, data: bytes, records: int
                         ) -> asyncio.Future[Position]:
        if records == 1:
            return issue(self, data, records)
        unwritten: asyncio.Future[Position] = asyncio.get_running_loop().create_future()
        unwritten.set_result(Position(0, 0))
        return unwritten

    monkeypatch.setattr(RecordBatcher, "_issue", answer_unwritten)
    fs = await record(tmp_path / "p1", transaction_workload, fs=CrashFS(tmp_path / "p1"),
                      config=WORKLOAD_CONFIG)
    findings, _ = await _check(fs.trace, states_budget(STATES), stop_first=True)
    assert findings, "answering a group that is not durable broke no promise"
