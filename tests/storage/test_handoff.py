"""The interpreter handed to a storage thread back from a write or an fdatasync
(storage/handoff.py, storage/_handoff.c).

The C calls give what os's give (results, file contents, errors); a thread back from one is
counted until it holds the interpreter, and a loop that yields lets it in; without the
extension the module is os's calls and never yields.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from interpreters import run_fresh

from storage import handoff

accel: Any
try:
    import storage._handoff as accel
except ImportError:   # the fallback's own test below still runs
    accel = None

#: The tests of the extension itself.
needs_accel = pytest.mark.skipif(accel is None,
                                 reason="built without a C compiler: os's calls run alone")

Calls = tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any]]


def _outcome(call: Callable[..., Any], *args: Any) -> Any:
    try:
        return ("ok", call(*args))
    except OSError as exc:
        return ("OSError", exc.errno)
    except TypeError:
        return ("TypeError", None)


def _run_all(path: Path, calls: Calls) -> list[Any]:
    pwrite, writev, fdatasync = calls
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        outcomes = [
            _outcome(pwrite, fd, b"head", 0),
            _outcome(pwrite, fd, memoryview(b"0123456789")[2:6], 100),
            _outcome(writev, fd, [b"a", bytearray(b"bc"), memoryview(b"def")]),
            _outcome(writev, fd, []),
            _outcome(writev, fd, [b"x"] * 1025),       # beyond IOV_MAX: EINVAL
            _outcome(writev, fd, [b"x", 3]),            # not a buffer
            _outcome(pwrite, fd, "text", 0),            # not a buffer
            _outcome(pwrite, fd, b"x", -1),             # EINVAL
            _outcome(fdatasync, fd),
        ]
    finally:
        os.close(fd)
    outcomes.append(path.read_bytes())
    closed = os.open(path, os.O_RDONLY)
    os.close(closed)
    outcomes += [_outcome(pwrite, closed, b"x", 0), _outcome(writev, closed, [b"x"]),
                 _outcome(fdatasync, closed)]           # EBADF each
    return outcomes


@needs_accel
def test_the_calls_give_what_os_gives(tmp_path: Path) -> None:
    implementations: dict[str, Calls] = {
        "os": (os.pwrite, os.writev, os.fdatasync),
        "handoff": (accel.pwrite, accel.writev, accel.fdatasync),
    }
    got = {name: _run_all(tmp_path / name, calls) for name, calls in implementations.items()}
    assert got["handoff"] == got["os"]
    assert ("OSError", errno.EINVAL) in got["os"] and ("OSError", errno.EBADF) in got["os"]
    assert handoff.AVAILABLE and handoff.fdatasync is accel.fdatasync


@needs_accel
def test_a_thread_back_from_fdatasync_is_let_in(tmp_path: Path) -> None:
    """The main thread holds the interpreter in a loop of Python (as a busy event loop does)
    and yields at each turn; the worker's fdatasyncs are counted until it holds the
    interpreter, and the main thread's yields let it in."""
    rounds = 50
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT, 0o644)
    start, done = threading.Event(), threading.Event()
    synced: list[int] = []

    def worker() -> None:
        start.wait()
        for i in range(rounds):
            os.pwrite(fd, b"x" * 512, i * 512)
            accel.fdatasync(fd)
            synced.append(i)
        done.set()

    waits_before, waited_before, yields_before, yielded_before = accel.stats()
    thread = threading.Thread(target=worker)
    thread.start()
    yielded = turns = 0
    start.set()
    try:
        while not done.is_set() and turns < 50_000_000:   # bounded, whatever happens
            turns += 1
            if accel.yield_to_waiting(100_000):
                yielded += 1
    finally:
        thread.join(timeout=60)
        os.close(fd)
    assert synced == list(range(rounds))
    assert yielded >= 1
    assert accel.waiting() == 0
    waits, waited, yields, yielded_s = accel.stats()
    assert waits >= waits_before + rounds and waited > waited_before
    assert yields >= yields_before + yielded and yielded_s > yielded_before
    assert accel.yield_to_waiting(100_000) is False   # nobody counted: nothing done


@needs_accel
def test_a_store_reports_its_threads_waits(tmp_path: Path) -> None:
    """The store's stats carry the figures (/metrics exports them): a group commit's writes
    and fdatasync are counted."""
    import asyncio

    from storage.config import StorageConfig
    from storage.store import SegmentStore

    async def run() -> tuple[int, int]:
        store = await SegmentStore.open(tmp_path, StorageConfig(fsync=True))
        try:
            before = store.stats().interpreter_waits
            ledger = await store.open_ledger("persistent://t/n/handoff")
            for i in range(5):
                await ledger.append(b"entry %d" % i)
            return before, store.stats().interpreter_waits
        finally:
            await store.close()

    before, after = asyncio.run(run())
    assert after >= before + 5 * 2   # a write and an fdatasync for each lone append


@needs_accel
def test_nobody_counted_no_yield() -> None:
    assert accel.waiting() == 0
    assert accel.yield_to_waiting(1_000) is False
    assert accel.yield_to_waiting(0) is False


def test_without_the_extension_os_calls_and_no_yield(tmp_path: Path) -> None:
    # a fresh interpreter where the extension cannot be imported (an install without a compiler)
    code = (
        "import os, sys; sys.modules['storage._handoff'] = None\n"
        "from storage import handoff, fileops\n"
        "assert not handoff.AVAILABLE and handoff.fdatasync is os.fdatasync\n"
        "assert handoff.pwrite is os.pwrite and handoff.writev is os.writev\n"
        "assert handoff.waiting() == 0 and handoff.yield_to_waiting(100) is False\n"
        f"fd = os.open({str(tmp_path / 'g')!r}, os.O_RDWR | os.O_CREAT)\n"
        "ops = fileops.FileOps()\n"
        "assert ops.writev(fd, [b'ab', b'c']) == 3 and ops.pwrite(fd, b'z', 0) == 1\n"
        "ops.fdatasync(fd)\n"
        "print('os')\n")
    assert run_fresh(code) == "os"
    assert (tmp_path / "g").read_bytes() == b"zbc"
