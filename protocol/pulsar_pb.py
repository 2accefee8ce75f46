"""Typed view of the generated ``proto.pulsar_api_pb2`` for mypy --strict.

The generated module builds its classes at import time, so mypy sees none of them. This
module re-exports exactly those classes (``protocol.pulsar_pb.BaseCommand is
proto.pulsar_api_pb2.BaseCommand``) and ships ``pulsar_pb.pyi``, the stub protoc writes with
``--pyi_out``; ``tests/protocol/test_protocol_pulsar_pb_stub.py`` fails when that stub is
stale. Inside ``protocol/`` write ``from protocol import pulsar_pb as pb``; elsewhere either
import works (this one type-checks).
"""

from proto.pulsar_api_pb2 import *  # noqa: F403
from proto.pulsar_api_pb2 import DESCRIPTOR  # noqa: F401
