"""Reschedules and cancels by key at load survive kill -9: thousands of keyed SENDs over the raw
wire (bench/reschedule_wire.py's driver, several producers with a window in flight, a Shared
consumer attached), the broker killed in the middle; after a restart the subscription holds
exactly one scheduled message per key still scheduled -- the one its last durable operation
sent -- and a backlog of just those: every replaced or cancelled version acknowledged, none
lost. Which operations in flight at the kill became durable is not known: each producer's
durable operations are a prefix of what it sent, at least what it had receipts for, and the
check accepts exactly those states (``states_after_kill``)."""

from __future__ import annotations

import pathlib
import random

from bench.reschedule_wire import Settings, run_kill9


def test_reschedules_and_cancels_at_load_survive_kill_9(tmp_path: pathlib.Path) -> None:
    settings = Settings(keys=1_000, ops=8_000, producers=4, window=64, size=64, permits=500,
                        timeout_s=60.0)
    ok, details = run_kill9(tmp_path, settings, random.Random(11), settle_s=60.0)
    assert ok, details
