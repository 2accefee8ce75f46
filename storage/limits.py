"""Process resource limits the store depends on.

A store keeps a file descriptor per open segment (plus transient ones for reads, cursor
saves and snapshots), so thousands of topics exceed the usual soft RLIMIT_NOFILE of 1024.
SegmentStore.open raises the soft limit to the hard limit once; if descriptors still run
out, the operations that open files raise TooManyOpenFilesError (storage/errors.py), which
is a resource problem, not a disk failure.
"""

from __future__ import annotations

import errno
import logging
import resource

log = logging.getLogger("horae.storage")

FD_EXHAUSTED = (errno.EMFILE, errno.ENFILE)


def raise_nofile_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit; returns the soft limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft == resource.RLIM_INFINITY or soft < hard:
        target = hard
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as exc:
            log.warning("storage: cannot raise RLIMIT_NOFILE from %s to %s: %s", soft, hard, exc)
            return soft
        if target != soft:
            log.info("storage: RLIMIT_NOFILE raised from %s to %s", soft, target)
        return target
    return soft


def is_fd_exhaustion(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in FD_EXHAUSTED
