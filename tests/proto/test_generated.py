"""The committed proto/*_pb2.py modules must match their .proto sources."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_generated_modules_are_up_to_date() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "proto.regenerate", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_generated_module_has_the_pulsar_base_command() -> None:
    from proto import pulsar_api_pb2 as pb

    assert pb.BaseCommand.CONNECT == 2
    assert pb.BaseCommand.DESCRIPTOR.fields_by_name["connect"].number == 2
    assert pb.MessageMetadata.DESCRIPTOR.fields_by_name["deliver_at_time"].number == 19
