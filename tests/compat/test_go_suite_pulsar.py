"""The Pulsar configuration run_go_suite.sh -broker pulsar writes from the Go suite's own file."""

from __future__ import annotations

import pathlib

from tests.compat.go_suite_pulsar import EXTRA, write_config

SUITE_CONF = """\
brokerServicePort=6650
tlsCertificateFilePath=/pulsar/certs/broker-cert.pem
tokenSecretKey=file:///pulsar/tokens/secret.key
brokerClientAuthenticationParameters={"tlsCertFile":"/pulsar/certs/client-cert.pem"}
transactionCoordinatorEnabled=true
journalSyncData=true
"""


def _settings(path: pathlib.Path) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    return {k: v for k, v in pairs}


def test_container_paths_point_into_the_module_and_bookie_keys_are_added(
        tmp_path: pathlib.Path) -> None:
    it = tmp_path / "integration-tests"
    (it / "conf").mkdir(parents=True)
    (it / "conf" / "standalone.conf").write_text(SUITE_CONF)
    out = tmp_path / "out"
    out.mkdir()
    conf = _settings(write_config(it, out))
    assert conf["tlsCertificateFilePath"] == f"{it}/certs/broker-cert.pem"
    assert conf["tokenSecretKey"] == f"file://{it}/tokens/secret.key"
    assert conf["brokerClientAuthenticationParameters"] == (
        '{"tlsCertFile":"' + f"{it}/certs/client-cert.pem" + '"}')
    assert conf["transactionCoordinatorEnabled"] == "true"   # the suite's own setting stays
    assert conf["brokerServicePort"] == "6650"
    for key, value in EXTRA.items():                         # the bookie's, each once
        assert conf[key] == value
    assert (out / "standalone.conf").read_text().count("journalSyncData=") == 1
