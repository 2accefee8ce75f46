"""deploy/prometheus: promtool checks both configs and the rules, and unit-tests every alert."""

from __future__ import annotations

import pathlib
import shutil

from deploy_testlib import DEPLOY, load_yaml, require_tool, run_tool

PROM = DEPLOY / "prometheus"
ALERTS = PROM / "alerts.yml"
ALERT_TESTS = PROM / "alerts_test.yml"


def _promtool() -> str:
    return require_tool("promtool", "apt-get install prometheus")


def test_prometheus_configs_pass_promtool_check_config() -> None:
    promtool = _promtool()
    for config in ("prometheus.yml", "prometheus-compose.yml"):
        proc = run_tool([promtool, "check", "config", str(PROM / config)])
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "alerts.yml" in proc.stdout   # the rule file is found and checked too


def test_alert_rules_pass_promtool_check_rules() -> None:
    proc = run_tool([_promtool(), "check", "rules", str(ALERTS)])
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_alert_passes_its_promtool_unit_tests() -> None:
    proc = run_tool([_promtool(), "test", "rules", str(ALERT_TESTS)])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_every_alert_has_a_firing_and_a_quiet_unit_test() -> None:
    alerts = {r["alert"] for g in load_yaml(ALERTS)["groups"] for r in g["rules"] if "alert" in r}
    firing: set[str] = set()
    quiet: set[str] = set()
    for case in load_yaml(ALERT_TESTS)["tests"]:
        for check in case.get("alert_rule_test", []):
            (firing if check["exp_alerts"] else quiet).add(check["alertname"])
    assert alerts - firing == set(), "alerts never shown to fire"
    assert alerts - quiet == set(), "alerts never shown to stay quiet"
    assert (firing | quiet) - alerts == set(), "tests for alerts that do not exist"


def test_promtool_unit_tests_catch_a_changed_threshold(tmp_path: pathlib.Path) -> None:
    """The unit tests have teeth: loosen one threshold and they fail."""
    promtool = _promtool()
    rules = ALERTS.read_text()
    assert "horae_storage_disk_usage_ratio) > 0.85" in rules
    (tmp_path / "alerts.yml").write_text(
        rules.replace("horae_storage_disk_usage_ratio) > 0.85", "horae_storage_disk_usage_ratio) > 0.95"))
    shutil.copy(ALERT_TESTS, tmp_path / "alerts_test.yml")
    proc = run_tool([promtool, "test", "rules", str(tmp_path / "alerts_test.yml")])
    assert proc.returncode != 0
    assert "HoraeDiskNearWatermark" in proc.stdout + proc.stderr


def test_prometheus_scrapes_horae_with_pulsar_labels_kept() -> None:
    for config in ("prometheus.yml", "prometheus-compose.yml"):
        doc = load_yaml(PROM / config)
        [job] = doc["scrape_configs"]
        assert job["metrics_path"] == "/metrics"
        assert job["honor_labels"] is True
        assert doc["rule_files"] == ["alerts.yml"]
    [by_hand] = load_yaml(PROM / "prometheus.yml")["scrape_configs"][0]["static_configs"]
    assert by_hand["targets"] == ["localhost:8080"]
