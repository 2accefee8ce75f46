"""The committed generated files (protocol/generated/*_pb2.py, protocol/pulsar_pb.pyi) match proto/."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_generated_files_match_the_proto_sources_byte_for_byte() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "proto" / "regenerate.py"), "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_generated_module_has_the_pulsar_base_command() -> None:
    from protocol.generated import pulsar_api_pb2 as pb

    assert pb.BaseCommand.CONNECT == 2
    assert pb.BaseCommand.DESCRIPTOR.fields_by_name["connect"].number == 2
    assert pb.MessageMetadata.DESCRIPTOR.fields_by_name["deliver_at_time"].number == 19


def test_proto_folder_is_not_a_python_package() -> None:
    # proto/ holds sources only; a package there would be installed over proto-plus's.
    assert not (ROOT / "proto" / "__init__.py").exists()
    assert not list((ROOT / "proto").glob("*_pb2.py"))
