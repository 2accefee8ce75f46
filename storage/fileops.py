"""The file layer: every syscall storage/ makes that can lose data goes through FileOps.

Theory of operation: storage code never calls os.write/os.fdatasync/os.replace directly; it
calls the FileOps instance it was given (SegmentStore.open(..., file_ops=...)). Tests inject
failures (EIO from fdatasync, short writes) by subclassing. Every method but pread_nowait
blocks and is only ever called from the writer thread or executor threads, never from the
event loop; pread_nowait never waits for the disk and is called on the loop
(storage/read_fds.py).

atomic_write() is the one crash-safe way to replace a small file: write a temporary file,
fsync it, rename it over the target, fsync the directory. A reader after a crash sees either
the old or the new content, never a mix.

pwrite, writev and fdatasync go through storage/handoff.py: the same calls, with the calling
thread counted as waiting for the interpreter from the system call's return until it has it,
so that a busy event loop lets it in (the optional C extension; os's own calls without it).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from storage.handoff import fdatasync as _fdatasync
from storage.handoff import pwrite as _pwrite
from storage.handoff import writev as _writev


class FileOps:
    """Thin wrapper around os; subclass to inject faults."""

    def open(self, path: str | Path, flags: int, mode: int = 0o644) -> int:
        return os.open(path, flags, mode)

    def close(self, fd: int) -> None:
        os.close(fd)

    def writev(self, fd: int, buffers: Sequence[bytes | memoryview]) -> int:
        return _writev(fd, buffers)

    def write(self, fd: int, data: bytes | memoryview) -> int:
        return os.write(fd, data)

    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> int:
        return _pwrite(fd, data, offset)

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        return os.pread(fd, size, offset)

    def pread_nowait(self, fd: int, buf: memoryview, offset: int) -> bool:
        """Fill ``buf`` from ``offset`` if the page cache holds all of it (True), else False: a
        read with ``RWF_NOWAIT``, which never waits for the disk. The one call made on the
        event loop (storage/read_fds.py, which reads into a buffer it keeps: a fresh one per
        read would cost a page fault per 4 KiB). Raises OSError (EOPNOTSUPP, ...) where the
        kernel or the file system does not take the flag."""
        try:
            got = os.preadv(fd, [buf], offset, os.RWF_NOWAIT)
        except BlockingIOError:
            return False
        return got == len(buf)

    def fdatasync(self, fd: int) -> None:
        _fdatasync(fd)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def ftruncate(self, fd: int, size: int) -> None:
        os.ftruncate(fd, size)

    def replace(self, src: Path, dst: Path) -> None:
        os.replace(src, dst)

    def unlink(self, path: Path) -> None:
        os.unlink(path)

    def create_dir(self, path: Path) -> None:
        """One new directory entry (not durable until its parent is fsync'ed)."""
        os.mkdir(path)

    # Composite helpers, built on the primitives above so injected faults apply to them too.

    def write_all(self, fd: int, data: bytes | memoryview) -> None:
        view = memoryview(data)
        while view:
            written = self.write(fd, view)
            view = view[written:]

    def pwrite_all(self, fd: int, data: bytes | memoryview, offset: int) -> None:
        view = memoryview(data)
        while view:
            written = self.pwrite(fd, view, offset)
            view = view[written:]
            offset += written

    def fsync_dir(self, path: Path) -> None:
        fd = self.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            self.fsync(fd)
        finally:
            self.close(fd)

    def atomic_write(self, path: Path, data: bytes, *, sync: bool = True) -> None:
        tmp = path.with_name(path.name + ".tmp")
        fd = self.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            self.write_all(fd, data)
            if sync:
                self.fsync(fd)
        finally:
            self.close(fd)
        self.replace(tmp, path)
        if sync:
            self.fsync_dir(path.parent)

    def read_file(self, path: str | Path) -> bytes:
        fd = self.open(path, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            chunks: list[bytes] = []
            offset = 0
            while offset < size:
                chunk = self.pread(fd, size - offset, offset)
                if not chunk:
                    break
                chunks.append(chunk)
                offset += len(chunk)
            return b"".join(chunks)
        finally:
            self.close(fd)

    def mkdir(self, path: Path, *, sync: bool = True) -> None:
        """Create path (and parents) and make every new directory entry durable."""
        missing: list[Path] = []
        p = path
        while not p.exists():
            missing.append(p)
            p = p.parent
        for d in reversed(missing):
            try:
                self.create_dir(d)
            except FileExistsError:
                continue
            if sync:
                self.fsync_dir(d.parent)
