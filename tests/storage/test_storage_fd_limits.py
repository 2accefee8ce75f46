"""Out of file descriptors is a clear error, not a fence; the soft RLIMIT_NOFILE is raised
at open; the id allocator counts ids that only cursors mention."""

from __future__ import annotations

import errno
import resource
from pathlib import Path

import pytest
from storage_testlib import ledger_dir

from storage import Position, SegmentStore, StorageConfig, TooManyOpenFilesError
from storage.fileops import FileOps
from storage.limits import raise_nofile_limit

TOPIC = "persistent://public/default/fds"
CONFIG = StorageConfig(mark_delete_rate_limit_per_sec=0, max_entries_per_ledger=3)


class NoFdOps(FileOps):
    """open() of a new segment file fails with EMFILE while `exhausted` is set."""

    def __init__(self) -> None:
        self.exhausted = False

    def open(self, path: Path, flags: int, mode: int = 0o644) -> int:
        if self.exhausted and Path(path).suffix == ".seg":
            raise OSError(errno.EMFILE, "injected EMFILE")
        return super().open(path, flags, mode)


async def test_emfile_creating_a_segment_fails_appends_without_fencing(tmp_path: Path) -> None:
    ops = NoFdOps()
    store = await SegmentStore.open(tmp_path, CONFIG, file_ops=ops)
    ml = await store.open_ledger(TOPIC)
    cursor = await ml.open_cursor("sub", initial_position="earliest")
    first = [await ml.append(b"a%d" % i) for i in range(3)]  # fills ledger 1: next rolls
    ops.exhausted = True
    with pytest.raises(TooManyOpenFilesError):
        await ml.append(b"no fd")
    assert not ml.fenced
    ops.exhausted = False
    later = await ml.append(b"fd again")
    assert later.ledger_id > first[-1].ledger_id + 1  # a fresh ledger after the abandoned one
    got = await ml.read_entries(first[0], 10)
    assert [e.data for e in got] == [b"a0", b"a1", b"a2", b"fd again"]
    cursor.delete([*first, later])
    assert cursor.mark_delete_position == later  # moved over the empty, abandoned ledger
    assert cursor.backlog == 0
    await store.close()
    store = await SegmentStore.open(tmp_path, CONFIG)
    ml = await store.open_ledger(TOPIC)
    got = await ml.read_entries(first[0], 10)
    assert [e.data for e in got] == [b"a0", b"a1", b"a2", b"fd again"]
    await store.close()


def test_soft_nofile_limit_is_raised_to_the_hard_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    lowered = min(soft, 256) if hard == resource.RLIM_INFINITY else min(soft, hard, 256)
    resource.setrlimit(resource.RLIMIT_NOFILE, (lowered, hard))
    try:
        assert raise_nofile_limit() == hard
        assert resource.getrlimit(resource.RLIMIT_NOFILE) == (hard, hard)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


async def test_ids_only_a_cursor_mentions_are_never_handed_out_again(tmp_path: Path) -> None:
    store = await SegmentStore.open(tmp_path, CONFIG)
    ml = await store.open_ledger(TOPIC)
    cursor = await ml.open_cursor("sub")  # names the empty current ledger: no segment file
    mentioned = cursor.mark_delete_position.ledger_id
    await store.close()
    assert not list(ledger_dir(tmp_path, TOPIC).glob("*.seg"))
    (tmp_path / "LEDGER_ID").unlink()  # the counter lost (rolled back by a crash)
    store = await SegmentStore.open(tmp_path, CONFIG)
    ml = await store.open_ledger(TOPIC)
    pos = await ml.append(b"x")
    assert pos.ledger_id > mentioned
    assert ml.cursors["sub"].mark_delete_position == Position(mentioned, -1)
    await store.close()
