"""The heap freezer freezes the survivors of a full collection and hands them back to the
collector when it thaws, so cyclic garbage among them is freed then; the serve process caps the
C allocator's arenas."""

from __future__ import annotations

import asyncio
import gc
import pathlib
import platform
import subprocess
import sys
import weakref
from collections.abc import Iterator

import pytest

from broker.heap import HeapFreezer, limit_malloc_arenas

ROOT = pathlib.Path(__file__).resolve().parents[2]


class _Node:
    def __init__(self) -> None:
        self.me = self   # a cycle: only the cyclic collector frees it


@pytest.fixture
def manual_gc() -> Iterator[None]:
    """No automatic collections during the test (the generations' counts move only by its own
    collections), nothing promoted into the oldest generation at its start."""
    enabled = gc.isenabled()
    gc.disable()
    gc.collect()
    try:
        yield
    finally:
        gc.unfreeze()
        if enabled:
            gc.enable()


def test_survivors_of_a_full_collection_are_frozen_and_thawed_for_the_next(manual_gc: None) -> None:
    freezer = HeapFreezer()
    gc.callbacks.append(freezer._on_collection)
    try:
        node = _Node()
        gone = weakref.ref(node)
        freezer.step(thaw=False)
        assert gc.get_freeze_count() == 0 and freezer.freezes == 0   # no full collection yet
        gc.collect()
        freezer.step(thaw=False)
        assert freezer.freezes == 1 and gc.get_freeze_count() > 0
        del node   # garbage now, but frozen: a full collection does not see it
        gc.collect()
        assert gone() is not None
        freezer.step(thaw=False)   # that collection's survivors are frozen too
        assert freezer.freezes == 2
        freezer.step(thaw=True)
        assert gc.get_freeze_count() == 0 and freezer.thaws == 1
        gc.collect()   # sees every object again: the cycle is freed
        assert gone() is None
        freezer.step(thaw=False)   # and what survived is frozen again
        assert freezer.freezes == 3
    finally:
        gc.callbacks.remove(freezer._on_collection)
        gc.unfreeze()


def test_a_check_collects_and_freezes_what_young_collections_promoted(manual_gc: None) -> None:
    freezer = HeapFreezer()
    gc.callbacks.append(freezer._on_collection)
    try:
        freezer.step(thaw=False)
        assert freezer.collections == 0 and freezer.freezes == 0   # nothing promoted yet
        live = _Node()
        node = _Node()
        gone = weakref.ref(node)
        gc.collect(1)   # a young collection: both survive it into the oldest generation
        assert gc.get_count()[2] > 0
        del node   # garbage now, in the oldest generation, which young collections never walk
        gc.collect(1)
        assert gone() is not None
        freezer.step(thaw=False)
        # the check ran the full collection itself: the garbage is freed, not frozen, and the
        # survivors are out of the next full collection's walk
        assert freezer.collections == 1 and freezer.freezes == 1
        assert gone() is None
        assert not any(o is live for o in gc.get_objects())
        freezer.step(thaw=False)   # nothing promoted since: no collection, no freeze
        assert freezer.collections == 1 and freezer.freezes == 1
    finally:
        gc.callbacks.remove(freezer._on_collection)


async def test_run_freezes_after_a_full_collection_and_unfreezes_when_cancelled() -> None:
    freezer = HeapFreezer(thaw_every_s=3600.0, check_s=0.01)
    task = asyncio.get_running_loop().create_task(freezer.run())
    try:
        await asyncio.sleep(0)
        gc.collect()
        for _ in range(500):   # bounded: the freezer checks every 10 ms
            if freezer.freezes:
                break
            await asyncio.sleep(0.01)
        assert freezer.freezes >= 1 and gc.get_freeze_count() > 0
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert gc.get_freeze_count() == 0
    assert freezer._on_collection not in gc.callbacks


async def test_run_settles_start_up_at_once_so_the_first_full_collection_skips_it() -> None:
    freezer = HeapFreezer(thaw_every_s=3600.0, check_s=3600.0)
    start_up = _Node()   # lives as long as the process, like the modules and the server
    full: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "stop" and info["generation"] == 2:
            full.append(1)

    gc.callbacks.append(count)
    task = asyncio.get_running_loop().create_task(freezer.run())
    try:
        await asyncio.sleep(0)
        # frozen before any full collection ran: a later one walks what came after start-up
        assert freezer.freezes == 1 and gc.get_freeze_count() > 0
        # and without one of its own (tens of ms of the loop when clients reconnect)
        assert not full
        assert not any(o is start_up for o in gc.get_objects())   # out of the collector's walk
    finally:
        gc.callbacks.remove(count)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert gc.get_freeze_count() == 0
    assert any(o is start_up for o in gc.get_objects())   # handed back on the way out


def test_malloc_arenas_are_left_to_an_explicit_environment_setting() -> None:
    assert limit_malloc_arenas(environ={"MALLOC_ARENA_MAX": "4"}) is False


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                    reason="mallopt is glibc's")
def test_malloc_arenas_are_capped_on_glibc() -> None:
    # in a child: the cap is process-wide
    code = "from broker.heap import limit_malloc_arenas; print(limit_malloc_arenas(environ={}))"
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "True"
