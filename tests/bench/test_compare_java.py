"""bench/compare_java.py drives a real Horae broker with the official Java client at a tiny count:
each of the three workloads runs to its end and its rate reaches the table (positive figures
only; timing is never asserted). Skips without a JDK and Maven, or when the client's jars
cannot be resolved."""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
import sys

import pytest

from bench.compare_java import BUILD_TIMEOUT_S, BuildFailed, client_classpath

ROOT = pathlib.Path(__file__).resolve().parents[2]
RATES = ("async publish, batching off (msg/s)", "async publish, batching on (msg/s)",
         "Shared consume + ack each (msg/s)")
RUN_TIMEOUT_S = 120  # three JVMs and a Horae broker; ~15 s once built

missing = [tool for tool in ("java", "mvn") if shutil.which(tool) is None]
pytestmark = pytest.mark.skipif(bool(missing), reason=f"{' and '.join(missing)} not installed: "
                                                      "the Java client needs a JDK 17+ and Maven")


@pytest.mark.timeout(int(BUILD_TIMEOUT_S) + RUN_TIMEOUT_S + 60)
def test_three_rates_reach_the_table_for_horae(tmp_path: pathlib.Path) -> None:
    try:
        client_classpath()   # the first build resolves the client's jars (once)
    except BuildFailed as exc:
        pytest.skip(f"the Java client could not be built: {exc}")
    out = tmp_path / "figures.json"
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "compare_java.py"), "--peers",
                           "horae", "--messages", "200", "--rounds", "1", "--warmup", "0",
                           "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = {line[:40].strip(): line[40:].split() for line in done.stdout.splitlines()}
    for rate in RATES:
        assert float(rows[rate][0].replace(",", "")) > 0, rate
    figures = json.loads(out.read_text())["figures"]
    for rate in RATES:
        assert figures[rate]["horae"][0] > 0
    assert figures["broker RSS after round (MiB)"]["horae"][0] > 0
