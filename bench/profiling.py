"""Sample a broker with py-spy and summarise the collapsed stacks as text.

Theory of operation
-------------------
:class:`PySpyRecorder` starts ``py-spy record --format raw --nonblocking`` on a pid when a
phase starts and stops it with SIGINT (py-spy then writes its file) when the phase stops.
Each line of the input is ``frame;frame;...;leaf COUNT``, outermost frame first, where py-spy
writes a frame as ``function (path/to/file.py:LINE)``. Frames are folded by function and file
(the line number dropped, the path cut to its last two parts) so one function is one row.
*Self* counts the samples whose leaf is the function; *total* counts the samples with the
function anywhere on the stack (once per sample, however deep the recursion). Frames above the
event loop's runner or a thread's ``run`` are dropped, so ``Runner.run``'s total is the event
loop's share and ``Thread.run``'s the other threads'. Both are printed
as percentages of all samples, the top ``top`` of each.

Usage: ``python bench/profiling.py FILE [--top 25]`` summarises a saved profile.
"""

from __future__ import annotations

import argparse
import pathlib
import re
import signal
import subprocess
import sys
import time
from collections import Counter

_ROOT_FUNCTIONS = frozenset({"Runner.run", "Thread.run"})
"""Where a thread's own work starts: the asyncio runner (uvloop's C loop shows as its self time)
and ``threading.Thread.run``; the frames above them are cut off."""
_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?)(?::\d+)?\)$")


def fold_frame(frame: str) -> str:
    """``func (a/b/c/file.py:12)`` -> ``func (c/file.py)``."""
    match = _FRAME.match(frame.strip())
    if match is None:
        return frame.strip()
    path = "/".join(match["file"].split("/")[-2:])
    return f"{match['func']} ({path})"


def count_collapsed(text: str) -> tuple[int, Counter[str], Counter[str]]:
    """(samples, self counts, total counts) of a collapsed-stack profile."""
    self_counts: Counter[str] = Counter()
    total_counts: Counter[str] = Counter()
    samples = 0
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [fold_frame(f) for f in stack.split(";")]
        # Drop the start-up frames above the event loop / thread entry: they are on every stack.
        for index in range(len(frames) - 1, -1, -1):
            if frames[index].split(" (")[0] in _ROOT_FUNCTIONS:
                frames = frames[index:]
                break
        samples += n
        self_counts[frames[-1]] += n
        for frame in set(frames):
            total_counts[frame] += n
    return samples, self_counts, total_counts


def summarise_collapsed(text: str, top: int = 25) -> str:
    samples, self_counts, total_counts = count_collapsed(text)
    if not samples:
        return "no samples"
    lines = [f"{samples} samples; top {top} by self time:"]
    lines += [f"  {100 * n / samples:5.1f}%  {frame}" for frame, n in self_counts.most_common(top)]
    lines.append(f"top {top} by total time (on the stack):")
    lines += [f"  {100 * n / samples:5.1f}%  {frame}" for frame, n in total_counts.most_common(top)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("file", type=pathlib.Path)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)
    print(summarise_collapsed(args.file.read_text(errors="replace"), args.top))
    return 0



# --------------------------------------------------------------------------- profiling


class PySpyRecorder:
    """Records one phase of a process with py-spy (raw collapsed stacks) into ``out_dir``."""

    def __init__(self, pid: int, out_dir: pathlib.Path, rate_hz: int = 250) -> None:
        self.pid = pid
        self.out_dir = out_dir
        self.rate_hz = rate_hz
        self.proc: subprocess.Popen[bytes] | None = None
        self.outputs: dict[str, pathlib.Path] = {}

    def __call__(self, phase: str, event: str) -> None:
        if event == "start":
            out = self.out_dir / f"horae-{phase}.txt"
            self.outputs[phase] = out
            self.proc = subprocess.Popen(
                [_py_spy(), "record", "--pid", str(self.pid), "--format", "raw", "--nonblocking",
                 "--rate", str(self.rate_hz), "--output", str(out)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(0.5)  # let py-spy attach before the phase starts
        elif self.proc is not None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None


def _py_spy() -> str:
    candidate = pathlib.Path(sys.executable).with_name("py-spy")
    return str(candidate) if candidate.exists() else "py-spy"


if __name__ == "__main__":
    raise SystemExit(main())
