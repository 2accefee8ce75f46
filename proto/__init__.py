"""Protobuf schemas of the Pulsar wire protocol and of Horae's delayed-index snapshots.

The ``*_pb2`` modules are generated (``python -m proto.regenerate``) and committed; never edit them.
"""
