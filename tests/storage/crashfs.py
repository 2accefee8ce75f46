"""A crash-simulating file layer for the storage tests (in the spirit of SQLite's test VFS and
ALICE): the recorder and its model of what a power loss may keep.

How the crash harness works (crashfs.py -> crashfs_states.py -> crashfs_check.py):
1. ``CrashFS`` is a FileOps that the store runs on (``SegmentStore.open(root, cfg,
   file_ops=CrashFS(root))``). Every call is passed through to the real directory, so the
   store sees ordinary files (mmap, fstat, glob all work), and is also appended to a trace
   of ``Op``s on a model of the tree: files and directories are inodes; a file inode has
   bytes, a directory inode has entries name -> inode. Real fsync/fdatasync are NOT issued:
   the real directory is scratch, durability is what the model decides.
2. The model is strict POSIX, like ALICE's "abstract persistence model": a write, truncate,
   create, unlink or mkdir is *volatile* until a covering sync: ``fsync``/``fdatasync`` of the
   file makes all its earlier writes and truncates durable (not its directory entry); fsync
   of a directory makes every earlier entry change in it durable. A rename is one atomic
   change, durable once either its source or its target directory was fsync'ed (a journaled
   rename is one transaction). Workloads add ``mark``s (an append acknowledged, a cursor flush
   returned, ...) to the same trace, so a crash point (a prefix of the trace) knows exactly
   what had been promised before it.
3. ``Replayer`` walks a trace and yields, at a crash point, the durable state and the ordered
   list of volatile ops; crashfs_states.py turns that into many possible post-crash states
   (volatile ops dropped, a subset kept (= reordered), writes torn at 512-byte sectors) and
   writes one into a directory; crashfs_check.py opens the real store on it and checks every
   promise, and holds the workloads.
4. Teeth: a ``CrashFS`` with ``disabled_site`` turns the syncs issued from one call site
   (the storage code location that asked for it, see ``call_site``) into no-ops that are
   recorded as not synced; the harness must then find a losing state (test_storage_crashfs).

A "process crash" (kill -9) keeps volatile data in the page cache: ``CrashFS.resume`` starts
a second recorder on the all-ops-applied view of a crash point with the volatile ops still
volatile, so a later power loss can take away what recovery read without syncing.
"""

from __future__ import annotations

import errno
import os
import sys
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import storage.fileops
from storage.fileops import FileOps

ROOT_INO = 0
_STORAGE_DIR = Path(storage.fileops.__file__).resolve().parent
_FILEOPS_FILE = Path(storage.fileops.__file__).name


@dataclass(frozen=True, slots=True)
class Op:
    """One traced operation. kind: write, trunc, sync (file), link (new entry; is_dir for
    mkdir), unlink, rename, dsync (directory), mark, lose (a failed fsync: the file's
    volatile writes will never be durable, though reads still see them, as after fsyncgate).
    ino: the file/dir inode concerned."""

    kind: str
    ino: int = -1
    offset: int = 0  # write: offset; trunc: new size
    data: bytes = b""
    dir: int = -1  # link/unlink: the directory; rename: the source directory
    name: str = ""
    dir2: int = -1  # rename: the target directory
    name2: str = ""
    is_dir: bool = False
    site: str = ""  # syncs: the call site that asked for it
    mark: tuple[Any, ...] = ()


@dataclass(slots=True)
class FsState:
    """A tree: file contents by inode, directory entries by inode (ROOT_INO is the root)."""

    files: dict[int, bytearray] = field(default_factory=dict)
    dirs: dict[int, dict[str, int]] = field(default_factory=lambda: {ROOT_INO: {}})

    def copy(self) -> FsState:
        return FsState({k: bytearray(v) for k, v in self.files.items()},
                       {k: dict(v) for k, v in self.dirs.items()})

    def apply(self, op: Op) -> None:
        kind = op.kind
        if kind == "write":
            f = self.files.setdefault(op.ino, bytearray())
            if len(f) < op.offset:
                f.extend(bytes(op.offset - len(f)))
            f[op.offset : op.offset + len(op.data)] = op.data
        elif kind == "trunc":
            f = self.files.setdefault(op.ino, bytearray())
            if op.offset < len(f):
                del f[op.offset :]
            else:
                f.extend(bytes(op.offset - len(f)))
        elif kind == "link":
            self.dirs.setdefault(op.dir, {})[op.name] = op.ino
            if op.is_dir:
                self.dirs.setdefault(op.ino, {})
            else:
                self.files.setdefault(op.ino, bytearray())
        elif kind == "unlink":
            entries = self.dirs.setdefault(op.dir, {})
            if entries.get(op.name) == op.ino:
                del entries[op.name]
        elif kind == "rename":
            src = self.dirs.setdefault(op.dir, {})
            if src.get(op.name) == op.ino:
                del src[op.name]
            self.dirs.setdefault(op.dir2, {})[op.name2] = op.ino

    def lookup(self, parts: Sequence[str]) -> int | None:
        ino = ROOT_INO
        for part in parts:
            entries = self.dirs.get(ino)
            if entries is None or part not in entries:
                return None
            ino = entries[part]
        return ino

    def walk(self) -> Iterable[tuple[tuple[str, ...], int, bool]]:
        """(path parts, inode, is_dir) of everything reachable from the root, parents first."""
        stack: list[tuple[tuple[str, ...], int]] = [((), ROOT_INO)]
        seen: set[int] = set()
        while stack:
            parts, ino = stack.pop()
            for name, child in sorted(self.dirs.get(ino, {}).items()):
                is_dir = child in self.dirs
                yield (*parts, name), child, is_dir
                if is_dir and child not in seen:
                    seen.add(child)
                    stack.append(((*parts, name), child))


@dataclass(slots=True)
class Trace:
    """Where recording started (a durable state plus ops still volatile then) and the ops."""

    base: FsState
    base_volatile: list[Op]
    ops: list[Op] = field(default_factory=list)

    def marks(self, upto: int | None = None) -> list[tuple[Any, ...]]:
        return [op.mark for op in self.ops[:upto] if op.kind == "mark"]


class Replayer:
    """Walks a trace forward, keeping the durable state and the volatile ops (in order)."""

    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        self.durable = trace.base.copy()
        self._seq = 0
        self.volatile: dict[int, Op] = {}  # seq -> op, insertion (= trace) order
        self._by_file: dict[int, list[int]] = {}
        self._by_dir: dict[int, list[int]] = {}
        self.position = 0  # ops of trace.ops consumed
        for op in trace.base_volatile:
            self._add(op)

    def _add(self, op: Op) -> None:
        seq = self._seq
        self._seq += 1
        self.volatile[seq] = op
        if op.kind in ("write", "trunc"):
            self._by_file.setdefault(op.ino, []).append(seq)
        elif op.kind in ("link", "unlink"):
            self._by_dir.setdefault(op.dir, []).append(seq)
        elif op.kind == "rename":
            self._by_dir.setdefault(op.dir, []).append(seq)
            if op.dir2 != op.dir:
                self._by_dir.setdefault(op.dir2, []).append(seq)

    def _settle(self, seqs: list[int]) -> None:
        for seq in sorted(seqs):
            op = self.volatile.pop(seq, None)
            if op is not None:
                self.durable.apply(op)

    def advance(self, upto: int) -> None:
        ops = self.trace.ops
        while self.position < upto:
            op = ops[self.position]
            self.position += 1
            if op.kind == "sync":
                self._settle(self._by_file.pop(op.ino, []))
            elif op.kind == "dsync":
                self._settle(self._by_dir.pop(op.dir, []))
            elif op.kind == "lose":
                for seq in self._by_file.pop(op.ino, []):
                    self.volatile.pop(seq, None)
            elif op.kind != "mark":
                self._add(op)

    def volatile_ops(self) -> list[Op]:
        return list(self.volatile.values())


def call_site() -> str:
    """The storage code location that asked for the current operation:
    "sync_stage.py:_sync_file>" for a direct call, "ids.py:ensure_durable>atomic_write>fsync"
    through FileOps composites (the chain of fileops.py functions in between)."""
    frame = sys._getframe(1)
    chain: list[str] = []
    while frame is not None:
        code = frame.f_code
        path = Path(code.co_filename)
        if path.parent == _STORAGE_DIR:
            if path.name == _FILEOPS_FILE:
                chain.append(code.co_name)
            else:
                return f"{path.name}:{code.co_name}>" + ">".join(reversed(chain))
        frame = frame.f_back  # type: ignore[assignment]
    return "?>" + ">".join(reversed(chain))


class CrashFS(FileOps):
    """FileOps that passes every call through to the real directory under root and records
    it on the model (see the module docstring). Syncs are recorded, never issued.
    disabled_site: the syncs asked for by that call site are skipped (not recorded as
    syncs; recorded in `skipped` instead), for the mutation test."""

    def __init__(self, root: Path, *, trace: Trace | None = None,
                 current: FsState | None = None, disabled_site: str | None = None) -> None:
        self.root = Path(root)
        self._lock = threading.RLock()
        if trace is None:
            base = _adopt(self.root)
            trace = Trace(base, [])
            current = base.copy()
        assert current is not None
        self.trace = trace
        self._current = current
        self._next_ino = max([ROOT_INO, *current.files, *current.dirs]) + 1
        self._fds: dict[int, tuple[int, bool]] = {}  # fd -> (inode, is_dir)
        self.disabled_site = disabled_site
        self.sites: dict[str, int] = {}  # sync call site -> calls (disabled ones included)
        self.skipped = 0
        self._fail_next: set[str] = set()

    @classmethod
    def resume(cls, root: Path, trace: Trace, crash_point: int, *, power_loss: bool = False,
               **kw: Any) -> CrashFS:
        """A process crash at crash_point: root gets every op applied (the page cache
        survived), the new recorder starts with the volatile ops still volatile. With
        power_loss: root gets only the durable state (every volatile op lost)."""
        replay = Replayer(trace)
        replay.advance(crash_point)
        volatile = [] if power_loss else replay.volatile_ops()
        current = replay.durable.copy()
        for op in volatile:
            current.apply(op)
        materialize(current, root)
        return cls(root, trace=Trace(replay.durable.copy(), volatile), current=current, **kw)

    # -- recording -------------------------------------------------------------------------

    def fail_next_sync(self, site: str) -> None:
        """The next sync from site fails with EIO; the file's volatile writes are lost to
        the disk (still readable: Linux marks failed pages clean, see fsyncgate)."""
        with self._lock:
            self._fail_next.add(site)

    def mark(self, *what: Any) -> None:
        """Record a promise the store made (called by workloads after an await returned)."""
        with self._lock:
            self.trace.ops.append(Op("mark", mark=tuple(what)))

    def _record(self, op: Op) -> None:
        self.trace.ops.append(op)
        self._current.apply(op)

    def _parts(self, path: Path) -> tuple[str, ...] | None:
        try:
            return Path(os.path.abspath(path)).relative_to(os.path.abspath(self.root)).parts
        except ValueError:
            return None

    def _resolve(self, path: Path) -> tuple[int, str, int | None] | None:
        """(parent inode, name, inode or None) of a path under root; None outside it."""
        parts = self._parts(path)
        if parts is None:
            return None
        if not parts:
            return ROOT_INO, "", ROOT_INO
        parent = self._current.lookup(parts[:-1])
        if parent is None:
            raise AssertionError(f"crashfs: parent of {path} is not modelled")
        ino = self._current.dirs.get(parent, {}).get(parts[-1])
        if ino is not None and not os.path.lexists(path):
            # Removed behind our back (shutil.rmtree, Path.unlink): record it as an unlink.
            self._record(Op("unlink", ino=ino, dir=parent, name=parts[-1]))
            ino = None
        return parent, parts[-1], ino

    def _new_ino(self) -> int:
        ino = self._next_ino
        self._next_ino += 1
        return ino

    # -- FileOps primitives ------------------------------------------------------------------

    def open(self, path: Path, flags: int, mode: int = 0o644) -> int:
        with self._lock:
            where = self._resolve(path)
            fd = os.open(path, flags, mode)
            if where is None:
                return fd
            parent, name, ino = where
            is_dir = bool(flags & os.O_DIRECTORY)
            if ino is None:
                if not flags & os.O_CREAT:
                    os.close(fd)
                    raise AssertionError(f"crashfs: {path} exists but is not modelled")
                ino = self._new_ino()
                self._record(Op("link", ino=ino, dir=parent, name=name))
            if flags & os.O_TRUNC:
                self._record(Op("trunc", ino=ino, offset=0))
            self._fds[fd] = (ino, is_dir)
            return fd

    def close(self, fd: int) -> None:
        with self._lock:
            self._fds.pop(fd, None)
        os.close(fd)

    def _wrote(self, fd: int, offset: int, data: bytes) -> None:
        entry = self._fds.get(fd)
        if entry is not None and data:
            self._record(Op("write", ino=entry[0], offset=offset, data=data))

    def writev(self, fd: int, buffers: Sequence[bytes | memoryview]) -> int:
        with self._lock:
            offset = os.lseek(fd, 0, os.SEEK_CUR)
            n = os.writev(fd, buffers)
            self._wrote(fd, offset, b"".join(bytes(b) for b in buffers)[:n])
            return n

    def write(self, fd: int, data: bytes | memoryview) -> int:
        with self._lock:
            offset = os.lseek(fd, 0, os.SEEK_CUR)
            n = os.write(fd, data)
            self._wrote(fd, offset, bytes(data[:n]))
            return n

    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> int:
        with self._lock:
            n = os.pwrite(fd, data, offset)
            self._wrote(fd, offset, bytes(data[:n]))
            return n

    def ftruncate(self, fd: int, size: int) -> None:
        with self._lock:
            os.ftruncate(fd, size)
            entry = self._fds.get(fd)
            if entry is not None:
                self._record(Op("trunc", ino=entry[0], offset=size))

    def _sync(self, fd: int) -> None:
        site = call_site()
        with self._lock:
            self.sites[site] = self.sites.get(site, 0) + 1
            if site == self.disabled_site:
                self.skipped += 1
                return
            entry = self._fds.get(fd)
            if entry is None:
                return
            ino, is_dir = entry
            if site in self._fail_next:
                self._fail_next.discard(site)
                if not is_dir:
                    self._record(Op("lose", ino=ino, site=site))
                raise OSError(errno.EIO, f"crashfs: injected EIO ({site})")
            if is_dir:
                self._record(Op("dsync", dir=ino, site=site))
            else:
                self._record(Op("sync", ino=ino, site=site))

    def fdatasync(self, fd: int) -> None:
        self._sync(fd)

    def fsync(self, fd: int) -> None:
        self._sync(fd)

    def replace(self, src: Path, dst: Path) -> None:
        with self._lock:
            a = self._resolve(src)
            b = self._resolve(dst)
            os.replace(src, dst)
            if a is None or b is None:
                return
            if a[2] is None:
                raise AssertionError(f"crashfs: rename of unmodelled {src}")
            self._record(Op("rename", ino=a[2], dir=a[0], name=a[1], dir2=b[0], name2=b[1]))

    def unlink(self, path: Path) -> None:
        with self._lock:
            where = self._resolve(path)
            os.unlink(path)
            if where is not None and where[2] is not None:
                self._record(Op("unlink", ino=where[2], dir=where[0], name=where[1]))

    def create_dir(self, path: Path) -> None:
        with self._lock:
            where = self._resolve(path)
            os.mkdir(path)
            if where is not None:
                self._record(Op("link", ino=self._new_ino(), dir=where[0], name=where[1],
                                is_dir=True))


def _adopt(root: Path) -> FsState:
    """The model of an existing tree, all of it durable (files the store does not open
    through FileOps, such as LOCK and metadata.db, are left out)."""
    state = FsState()
    next_ino = ROOT_INO + 1
    if not root.exists():
        return state

    def visit(directory: Path, ino: int) -> None:
        nonlocal next_ino
        for child in sorted(directory.iterdir()):
            if ino == ROOT_INO and child.name in ("LOCK", "metadata.db", "metadata.db-wal",
                                                  "metadata.db-shm", "metadata.db-journal"):
                continue
            child_ino = next_ino
            next_ino += 1
            state.dirs[ino][child.name] = child_ino
            if child.is_dir():
                state.dirs[child_ino] = {}
                visit(child, child_ino)
            else:
                state.files[child_ino] = bytearray(child.read_bytes())

    visit(root, ROOT_INO)
    return state


def materialize(state: FsState, root: Path) -> None:
    """Write the tree of state into root (which must not exist yet or be empty)."""
    root.mkdir(parents=True, exist_ok=True)
    for parts, ino, is_dir in state.walk():
        path = root.joinpath(*parts)
        if is_dir:
            path.mkdir()
        else:
            path.write_bytes(state.files.get(ino, b""))
