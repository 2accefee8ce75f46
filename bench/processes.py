"""A broker child process as the benchmarks see it: free loopback ports, readiness, CPU, memory.

Theory of operation
-------------------
:class:`Broker` is one started broker (Horae, pulsar-lite or Apache Pulsar): its process, ports,
data directory and log; :meth:`Broker.stop` terminates, then kills it. :func:`cpu_seconds` and
:func:`rss_mib` read ``/proc`` for the broker process and all its threads;
:func:`admin_request` and :func:`topic_stats` are the admin REST calls benchmarks make. Shared by the
starters in :mod:`bench.brokers` and the Pulsar launcher in :mod:`bench.pulsar_peer`, which
import this module and nothing of each other's.

:func:`compile_sources` writes the ``.pyc`` files of a checkout's packages before a broker
process starts from it, so that every start is measured as installed: pip compiles a package's
modules when it installs it, while an environment with ``PYTHONDONTWRITEBYTECODE=1`` would have
each started process compile the checkout's sources again, and write none.
"""

from __future__ import annotations

import compileall
import json
import os
import pathlib
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0
_CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


#: The checkout's packages a broker process imports (pyproject.toml's packages).
SOURCE_PACKAGES = ("broker", "protocol", "storage", "jobs", "cli")


def compile_sources(root: pathlib.Path, packages: tuple[str, ...] = SOURCE_PACKAGES) -> None:
    """Compile *root*'s packages to ``.pyc`` (those not already current): the broker then starts
    as an installed one does, whatever ``PYTHONDONTWRITEBYTECODE`` says."""
    for package in packages:
        if (root / package).is_dir() and not compileall.compile_dir(root / package, quiet=2):
            raise RuntimeError(f"{root / package} does not compile")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, proc: subprocess.Popen[bytes], log: pathlib.Path,
              timeout_s: float = START_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"broker exited: {log.read_text(errors='replace')[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"broker did not listen on {port} within {timeout_s} s")


def admin_request(web: str, method: str, path: str, body: object | None = None, *,
                  timeout_s: float = 60.0) -> int:
    """An admin REST call on the broker at ``web`` (a JSON body if given); its HTTP status."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(web + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:  # loopback only
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def topic_stats(web: str, topic: str) -> dict[str, Any]:
    """``GET /admin/v2/persistent/.../stats`` of ``topic`` (a full ``persistent://`` name)."""
    url = f"{web}/admin/v2/persistent/{topic.split('://', 1)[1]}/stats"
    with urllib.request.urlopen(url, timeout=60) as resp:  # loopback only
        return dict(json.loads(resp.read()))


def rss_mib(pid: int, field: str = "VmRSS") -> float:
    """Resident memory of process ``pid`` in MiB; ``field="VmHWM"`` gives its peak."""
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_seconds(pid: int, thread: int | None = None) -> float:
    """User + system CPU seconds of process ``pid`` and all its threads (``/proc/PID/stat``),
    or of its thread ``thread`` alone (``/proc/PID/task/TID/stat``; the main thread's id is
    the pid: a Python broker's event loop)."""
    path = f"/proc/{pid}/stat" if thread is None else f"/proc/{pid}/task/{thread}/stat"
    with open(path, "rb") as fh:
        stat = fh.read()
    # fields after "(comm)": state is field 3, utime field 14, stime field 15 (proc(5))
    fields = stat[stat.rindex(b")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS_PER_S


@dataclass
class Broker:
    name: str
    host: str
    port: int
    proc: subprocess.Popen[bytes]
    data: pathlib.Path
    log: pathlib.Path
    web_port: int | None = None
    version: str = ""

    @property
    def url(self) -> str:
        return f"pulsar://{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
