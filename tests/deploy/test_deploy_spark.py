"""deploy/spark/submit-rollup.sh builds a spark-submit command line for a cluster."""

from __future__ import annotations

import os
import subprocess

from deploy_testlib import DEPLOY


def test_submit_script_builds_a_cluster_submission() -> None:
    script = DEPLOY / "spark" / "submit-rollup.sh"
    env = {
        **os.environ,
        "SPARK_SUBMIT": "echo",
        "SPARK_MASTER": "spark://master.example:7077",
        "WINDOWS": "5m",
    }
    proc = subprocess.run(
        ["bash", str(script), "--top", "3"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    )
    args = proc.stdout.split()
    assert args[args.index("--master") + 1] == "spark://master.example:7077"
    assert any(a.endswith("jobs/metrics_rollup.py") for a in args)
    assert args[args.index("--window") + 1] == "5m"
    assert args[-2:] == ["--top", "3"]
