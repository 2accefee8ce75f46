"""deploy/systemd: the unit passes ``systemd-analyze verify`` and its hardening is scored.

``systemd-analyze verify`` checks the unit the way systemd loads it (unknown keys, bad values,
a missing executable); it reports problems on stderr with exit 0 for many of them, so the test
requires an empty report. ExecStart names /opt/horae/bin/horae, which exists only once installed:
the test verifies a copy whose ExecStart points at this checkout's ``horae`` script.
"""

from __future__ import annotations

import pathlib

import pytest
from deploy_testlib import DEPLOY, find_tool, require_tool, run_tool

UNIT = DEPLOY / "systemd" / "horae.service"
ENV_FILE = DEPLOY / "systemd" / "horae.env"
INSTALLED_HORAE = "/opt/horae/bin/horae"
# systemd-analyze security's exposure score, 0 (locked down) to 10; 2.0 is "OK" territory.
MAX_EXPOSURE = 20   # --threshold is in tenths


def _local_unit(tmp_path: pathlib.Path, text: str | None = None) -> pathlib.Path:
    horae = find_tool("horae")
    if horae is None:
        pytest.skip("the horae console script is not installed (pip install -e .)")
    unit = tmp_path / "horae.service"
    unit.write_text((text if text is not None else UNIT.read_text())
                    .replace(INSTALLED_HORAE, horae))
    return unit


def test_unit_passes_systemd_analyze_verify(tmp_path: pathlib.Path) -> None:
    analyze = require_tool("systemd-analyze", "apt-get install systemd")
    assert INSTALLED_HORAE in UNIT.read_text()
    proc = run_tool([analyze, "verify", str(_local_unit(tmp_path))])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stderr.strip() == "", proc.stderr


def test_systemd_analyze_verify_catches_a_broken_unit(tmp_path: pathlib.Path) -> None:
    """The check has teeth: a misspelt option and a bad value are reported."""
    analyze = require_tool("systemd-analyze", "apt-get install systemd")
    broken = UNIT.read_text().replace("ProtectSystem=strict", "ProtectSystem=stricter") \
        .replace("PrivateTmp=yes", "PrivateTmpp=yes")
    proc = run_tool([analyze, "verify", str(_local_unit(tmp_path, broken))])
    assert "Failed to parse protect system value" in proc.stderr
    assert "PrivateTmpp" in proc.stderr


def test_unit_hardening_scores_ok_offline(tmp_path: pathlib.Path) -> None:
    analyze = require_tool("systemd-analyze", "apt-get install systemd")
    proc = run_tool([analyze, "security", "--offline=yes", f"--threshold={MAX_EXPOSURE}",
                     str(_local_unit(tmp_path))])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr


def test_unit_keeps_the_data_dir_writable_and_everything_else_read_only() -> None:
    """What verify cannot judge: the options that make the unit fit Horae."""
    settings: dict[str, list[str]] = {}
    for line in UNIT.read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            settings.setdefault(key.strip(), []).append(value.strip())
    data_dir = "/var/lib/horae"
    assert settings["ProtectSystem"] == ["strict"]
    assert settings["ReadWritePaths"] == [data_dir]
    assert f"--data-dir {data_dir}" in settings["ExecStart"][0]
    assert settings["StateDirectory"] == ["horae"]
    assert settings["EnvironmentFile"] == ["-/etc/horae/horae.env"]
    for option in ("NoNewPrivileges", "PrivateTmp", "ProtectHome"):
        assert settings[option] == ["yes"], option
    assert int(settings["LimitNOFILE"][0]) >= 65536


def test_env_file_loads_as_a_valid_broker_config() -> None:
    from broker.config_loading import load_config
    from broker.config_sources import parse_env_file

    env = parse_env_file(ENV_FILE.read_text())
    assert env, "horae.env sets nothing"
    config = load_config(None, environ=env)
    assert config.broker_service_port == 6650
    assert config.journal_sync_data is True
    assert config.log_format == "text"
