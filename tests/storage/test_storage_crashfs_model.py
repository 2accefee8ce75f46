"""The crash harness's own model (crashfs.py, crashfs_states.py): what a simulated power
loss may keep, pinned on tiny traces, so a test of the store is only as lenient as intended."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from crashfs import CrashFS, FsState, Op, Replayer, call_site
from crashfs_states import build, tear

from storage.ids import IdAllocator


def _state(fs: CrashFS, mode: str, upto: int | None = None) -> FsState:
    replay = Replayer(fs.trace)
    replay.advance(len(fs.trace.ops) if upto is None else upto)
    return build(replay.durable, replay.volatile_ops(), mode, random.Random(1))[0]


def _file(state: FsState, *parts: str) -> bytes | None:
    ino = state.lookup(parts)
    return None if ino is None else bytes(state.files.get(ino, b""))


def test_a_write_is_durable_only_after_fsync_and_directory_fsync(tmp_path: Path) -> None:
    fs = CrashFS(tmp_path)
    fd = fs.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT)
    fs.write_all(fd, b"hello")
    after_write = len(fs.trace.ops)
    fs.fsync(fd)
    after_fsync = len(fs.trace.ops)
    fs.fsync_dir(tmp_path)
    fs.close(fd)
    assert _file(_state(fs, "drop_all", after_write), "f") is None
    assert _file(_state(fs, "keep_all", after_write), "f") == b"hello"
    assert _file(_state(fs, "drop_all", after_fsync), "f") is None  # its entry is volatile
    assert _file(_state(fs, "dirs_only", after_fsync), "f") == b"hello"
    assert _file(_state(fs, "drop_all"), "f") == b"hello"


def test_a_rename_is_durable_once_either_directory_is_synced(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "x").write_bytes(b"x")
    fs = CrashFS(tmp_path)  # adopts the tree as durable
    fs.replace(tmp_path / "a" / "x", tmp_path / "b" / "y")
    before_sync = len(fs.trace.ops)
    fs.fsync_dir(tmp_path / "a")
    lost = _state(fs, "drop_all", before_sync)
    assert _file(lost, "a", "x") == b"x" and _file(lost, "b", "y") is None
    done = _state(fs, "drop_all")
    assert _file(done, "a", "x") is None and _file(done, "b", "y") == b"x"


def test_a_torn_write_keeps_whole_sectors_of_it() -> None:
    op = Op("write", ino=1, offset=100, data=bytes(range(256)) * 8)  # 2048 bytes
    pieces = tear(op, random.Random(3))
    assert 0 < len(pieces) < 5
    for piece in pieces:
        assert piece.offset == 100 or piece.offset % 512 == 0
        end = piece.offset + len(piece.data)
        assert end == 2148 or end % 512 == 0
        assert piece.data == op.data[piece.offset - 100 : end - 100]


def test_the_call_site_is_the_storage_code_that_asked(tmp_path: Path) -> None:
    fs = CrashFS(tmp_path)
    IdAllocator.load(fs, tmp_path / "LEDGER_ID", -1)
    assert set(fs.sites) == {"ids.py:ensure_durable>atomic_write",
                             "ids.py:ensure_durable>atomic_write>fsync_dir"}
    assert call_site().startswith("?>")  # not called from storage/


def test_a_disabled_site_records_no_sync(tmp_path: Path) -> None:
    fs = CrashFS(tmp_path, disabled_site="ids.py:ensure_durable>atomic_write")
    IdAllocator.load(fs, tmp_path / "LEDGER_ID", -1)
    assert fs.skipped == 1
    assert _file(_state(fs, "drop_all"), "LEDGER_ID") == b""  # renamed, content volatile


def test_a_process_crash_keeps_volatile_data_volatile(tmp_path: Path) -> None:
    fs = CrashFS(tmp_path / "one")
    (tmp_path / "one").mkdir()
    fd = fs.open(tmp_path / "one" / "f", os.O_WRONLY | os.O_CREAT)
    fs.fsync_dir(tmp_path / "one")
    fs.write_all(fd, b"unsynced")
    fs.close(fd)
    resumed = CrashFS.resume(tmp_path / "two", fs.trace, len(fs.trace.ops))
    assert (tmp_path / "two" / "f").read_bytes() == b"unsynced"  # the page cache survived
    assert _file(_state(resumed, "drop_all"), "f") == b""
    fd = resumed.open(tmp_path / "two" / "f", os.O_WRONLY)
    resumed.fdatasync(fd)
    resumed.close(fd)
    assert _file(_state(resumed, "drop_all"), "f") == b"unsynced"


def test_a_failed_fsync_loses_the_writes_for_good(tmp_path: Path) -> None:
    fs = CrashFS(tmp_path)
    fd = fs.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT)
    fs.fsync_dir(tmp_path)
    fs.write_all(fd, b"lost")
    fs.fail_next_sync("?>")  # the site of a call from outside storage/
    with pytest.raises(OSError):
        fs.fdatasync(fd)
    fs.fdatasync(fd)  # "succeeds", as after fsyncgate, and proves nothing
    fs.close(fd)
    assert (tmp_path / "f").read_bytes() == b"lost"  # still readable
    assert _file(_state(fs, "keep_all"), "f") == b""
