"""How much of the long property, fault and soak runs the suite takes.

The suite (``bash .ci/run``, the README's test command) runs a sample of each: fewer
generated examples, kill cycles and soak seconds, so the whole suite stays well inside CI's
time on a 2-core machine. ``HORAE_FULL_RUNS=1`` runs the full counts each test names (about
ten more minutes; DEVELOPERS.md lists them). A test's own variable (``HORAE_CRASH_ITERATIONS``,
``HORAE_REVISION_SOAK_S``, ...) still wins over both.
"""

from __future__ import annotations

import os

FULL_RUNS = os.environ.get("HORAE_FULL_RUNS", "") == "1"


def examples(*, full: int, sample: int) -> int:
    """Generated examples for a property test: *full* in a full run, else *sample*."""
    return full if FULL_RUNS else sample


def amount(variable: str, *, full: float, sample: float) -> float:
    """A count or a duration: *variable* when set, else *full* in a full run, else *sample*."""
    given = os.environ.get(variable)
    if given:
        return float(given)
    return full if FULL_RUNS else sample
