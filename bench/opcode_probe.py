"""The Python opcodes a broker process runs, per thread and per function, read from outside.

Theory of operation
-------------------
A figure the machine's load cannot move: the bytecode instructions each of the broker's
threads executes (``sys.settrace`` with ``f_trace_opcodes``, as ``bench/lone_path.py --opcodes``
does in process). It is loaded into a ``horae serve`` process started with ``PYTHONPATH`` set
to ``bench/probes_site`` and ``HORAE_OPCODES`` set to a file: every thread started later is
traced from its start (``threading.settrace``), the main thread (the event loop) from the first
SIGUSR1 on (tracing the start-up would slow it several-fold); opcodes are counted only between
a SIGUSR1 (a phase starts) and a SIGUSR2 (it ended), so what runs between phases (the checks'
REST calls) runs at nearly full speed. (A frame entered while not counting, a thread's or a
task's long-lived loop, is not traced: its callees are.) Each signal writes the counts so far to that file (JSON, replaced atomically, with a sequence
number): per thread name its total, and per function (qualified name, file and first line) its
count, thread by thread. :func:`snapshot` asks for one and reads it; :func:`difference` turns
two into a phase's counts. Tracing slows the broker several-fold: its CPU and latency figures
mean nothing while it runs; the counts do not depend on them except through batching (how many
SENDs one read, one group commit or one dispatch round takes), which the window sets.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

__all__ = ["ENV", "SITE_DIR", "OpcodeCounter", "difference", "install", "snapshot"]

ENV = "HORAE_OPCODES"
SITE_DIR = Path(__file__).resolve().parent / "probes_site"


class OpcodeCounter:
    """A ``sys.settrace`` function counting the opcodes run, per code object: the in-process
    counter of ``bench/lone_path.py`` and ``bench/dispatch_path.py`` (one thread at a time)."""

    def __init__(self) -> None:
        self.per_code: collections.Counter[CodeType] = collections.Counter()

    def reset(self) -> None:
        self.per_code.clear()

    def __call__(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event != "call":
            return None
        frame.f_trace_opcodes = True
        per_code = self.per_code
        code = frame.f_code

        def local(frame: FrameType, event: str, arg: Any) -> Any:
            if event == "opcode":
                per_code[code] += 1
            return local

        return local


def install(path: str) -> None:
    """Count this process's opcodes per thread and function; dump them to *path* on SIGUSR1."""
    per_thread: dict[str, collections.Counter[CodeType]] = {}
    sequence = [0]
    counting = [False]
    own_file = __file__     # the dumps' own opcodes are left out

    def tracer_for(name: str) -> Any:
        counts = per_thread.setdefault(name, collections.Counter())

        def trace(frame: FrameType, event: str, arg: Any) -> Any:
            if event != "call" or not counting[0]:
                return None
            frame.f_trace_opcodes = True
            code = frame.f_code

            def local(frame: FrameType, event: str, arg: Any) -> Any:
                if event == "opcode" and counting[0]:
                    counts[code] += 1
                return local

            return local

        return trace

    def thread_trace(frame: FrameType, event: str, arg: Any) -> Any:
        # the first call in a new thread: install that thread's own counter
        tracer = tracer_for(threading.current_thread().name)
        sys.settrace(tracer)
        return tracer(frame, event, arg)

    def dump(signum: int, frame: Any) -> None:
        counting[0] = signum == signal.SIGUSR1
        if not sequence[0]:
            sys.settrace(tracer_for("loop"))    # the frames called from now on
        sequence[0] += 1
        out: dict[str, Any] = {"sequence": sequence[0], "threads": {}}
        for name, counts in list(per_thread.items()):
            out["threads"][name] = {
                f"{code.co_qualname} ({code.co_filename}:{code.co_firstlineno})": n
                for code, n in list(counts.items()) if code.co_filename != own_file}
        tmp = f"{path}.tmp"
        Path(tmp).write_text(json.dumps(out))
        os.replace(tmp, path)

    signal.signal(signal.SIGUSR1, dump)
    signal.signal(signal.SIGUSR2, dump)
    threading.settrace(thread_trace)


def _thread_group(name: str) -> str:
    """Pool threads (``ThreadPoolExecutor-0_3``) summed as one."""
    return name.rsplit("_", 1)[0] if name.startswith("ThreadPoolExecutor") else name


def snapshot(pid: int, path: Path, start: bool, timeout_s: float = 60.0,
             ) -> dict[str, dict[str, int]]:
    """Ask the broker *pid* for its counts and read them: thread -> function -> count; with
    *start* it counts from now on (SIGUSR1), else it stops counting (SIGUSR2)."""
    before = json.loads(path.read_text())["sequence"] if path.exists() else 0
    os.kill(pid, signal.SIGUSR1 if start else signal.SIGUSR2)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists():
            data = json.loads(path.read_text())
            if data["sequence"] > before:
                grouped: dict[str, collections.Counter[str]] = {}
                for name, counts in data["threads"].items():
                    grouped.setdefault(_thread_group(name), collections.Counter()).update(counts)
                return {name: dict(c) for name, c in grouped.items()}
        time.sleep(0.05)
    raise RuntimeError("the broker did not write its opcode counts")


def difference(after: dict[str, dict[str, int]], before: dict[str, dict[str, int]],
               ) -> dict[str, collections.Counter[str]]:
    """Per thread, per function: the opcodes run between two snapshots."""
    out: dict[str, collections.Counter[str]] = {}
    for name, counts in after.items():
        old = before.get(name, {})
        diff = collections.Counter({f: n - old.get(f, 0) for f, n in counts.items()
                                    if n > old.get(f, 0)})
        out[name] = diff
    return out
