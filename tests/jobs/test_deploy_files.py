"""deploy/ for the metrics pipeline: Prometheus scrape config, Grafana dashboard, spark-submit."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
DASHBOARD_METRICS = (
    "pulsar_rate_in",
    "pulsar_rate_out",
    "pulsar_msg_backlog",
    "pulsar_subscription_back_log",
    "pulsar_subscription_delayed",
    "pulsar_delayed_message_index_size_bytes",
    "pulsar_broker_topic_messages_delayed_rejected_total",
    "pulsar_broker_topic_messages_fixed_delay_overridden_total",
    "pulsar_storage_write_latency",
)


def _dashboard() -> dict[str, Any]:
    return json.loads((DEPLOY / "grafana" / "horae-dashboard.json").read_text())


def _exprs(dashboard: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


def test_prometheus_scrapes_horae_metrics_endpoint() -> None:
    text = (DEPLOY / "prometheus" / "prometheus.yml").read_text()
    assert re.search(r"metrics_path:\s*/metrics", text)
    assert re.search(r"targets:\s*\[\s*\"localhost:8080\"\s*\]", text)


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed")
def test_prometheus_config_passes_promtool() -> None:
    path = DEPLOY / "prometheus" / "prometheus.yml"
    proc = subprocess.run(
        ["promtool", "check", "config", str(path)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_dashboard_queries_every_pulsar_metric_it_promises() -> None:
    exprs = "\n".join(_exprs(_dashboard()))
    for metric in DASHBOARD_METRICS:
        assert re.search(rf"\b{metric}(_bucket)?\{{", exprs), metric


def test_dashboard_panels_have_unique_ids_and_layout() -> None:
    dashboard = _dashboard()
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24
        if panel["type"] != "row":
            assert panel["targets"], panel["title"]
    titles = " ".join(p["title"] for p in dashboard["panels"]).lower()
    for section in ("topics", "subscriptions", "delayed delivery"):
        assert section in titles


def test_dashboard_queries_have_balanced_brackets() -> None:
    for expr in _exprs(_dashboard()):
        for opening, closing in ("()", "{}", "[]"):
            assert expr.count(opening) == expr.count(closing), expr


def test_submit_script_builds_a_cluster_submission(tmp_path: Path) -> None:
    script = DEPLOY / "spark" / "submit-rollup.sh"
    env = {
        **os.environ,
        "SPARK_SUBMIT": "echo",
        "SPARK_MASTER": "spark://master.example:7077",
        "WINDOWS": "5m",
        "JOBS_ZIP": str(tmp_path / "jobs.zip"),
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
    assert args[args.index("--py-files") + 1] == str(tmp_path / "jobs.zip")


def test_submitted_script_imports_the_jobs_package_from_the_py_files_zip(tmp_path: Path) -> None:
    # What spark-submit does with the submission: the zip on PYTHONPATH, the job run as a script
    # (its own folder first on sys.path), here with a missing input so no JVM starts.
    zipped = tmp_path / "jobs.zip"
    env = {**os.environ, "SPARK_SUBMIT": "true", "JOBS_ZIP": str(zipped)}
    subprocess.run(["bash", str(DEPLOY / "spark" / "submit-rollup.sh")], env=env, timeout=60, check=True)
    with zipfile.ZipFile(zipped) as archive:
        assert {"jobs/__init__.py", "jobs/metrics_rollup.py", "jobs/rollup_aggregate.py",
                "jobs/rollup_report.py"} <= set(archive.namelist())
    # -S: no site-packages, so `jobs` can only come from the zip (not an installed Horae).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    script = DEPLOY.parent / "jobs" / "metrics_rollup.py"
    args = [sys.executable, "-S", str(script), "--input", str(tmp_path / "none"), "--output", str(tmp_path)]
    proc = subprocess.run(
        args, cwd=tmp_path, env={**env, "PYTHONPATH": str(zipped)}, capture_output=True, text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert "does not exist: nothing to roll up" in proc.stderr
    bare = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert bare.returncode == 1
    assert "No module named 'jobs'" in bare.stderr
