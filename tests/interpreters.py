"""A fresh Python interpreter for a test: code run in its own process, from the project's root.

``run_fresh(code)`` runs ``code`` with ``python -c`` in a new interpreter (the tests' own
executable, the checkout as its working directory) and returns what it printed, stripped; a
non-zero exit fails the test with the end of its stderr. For what one process cannot undo:
an optional C extension whose import is refused (``sys.modules[name] = None`` first, as an
install without a compiler), the modules a start imports. Tests import it as
``from interpreters import run_fresh`` (``tests/`` is on ``sys.path`` through its conftest).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_fresh(code: str, timeout_s: float = 60) -> str:
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout_s)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.strip()
