"""Typed view of the generated ``protocol.generated.pulsar_api_pb2`` for mypy --strict.

The generated module builds its classes at import time, so mypy sees none of them. This
module re-exports exactly those classes (``protocol.pulsar_pb.BaseCommand is
protocol.generated.pulsar_api_pb2.BaseCommand``) and ships ``pulsar_pb.pyi``, the stub protoc
writes with ``--pyi_out`` (``python proto/regenerate.py`` rewrites both, and
``tests/proto/test_generated.py`` fails when either is stale). Import this module, not the
generated one: ``from protocol import pulsar_pb as pb``.
"""

from protocol.generated.pulsar_api_pb2 import *  # noqa: F403
from protocol.generated.pulsar_api_pb2 import DESCRIPTOR  # noqa: F401
