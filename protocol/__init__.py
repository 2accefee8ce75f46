"""Horae's sans-IO codec for Apache Pulsar's binary protocol (version 20).

Bytes in, frames and commands out; ``encode_*() -> bytes`` out. No IO, no event loop, no clock:
the broker's connection handler owns the socket and feeds :class:`protocol.frames.FrameDecoder`.

Modules: :mod:`~protocol.frames` (incremental frame decoder), :mod:`~protocol.command_check`
(command validation), :mod:`~protocol.send_path` (protobuf-free SEND parse and bulk
SEND_RECEIPTs), :mod:`~protocol.commands`
(encoders; client-side ones live in :mod:`~protocol.client_commands` and are re-exported),
:mod:`~protocol.framing` (frame headers, checksum, varints), :mod:`~protocol.topic_list`
(topic-list watcher commands and hash), :mod:`~protocol.metadata`
(entries, message metadata, batches, Key_Shared hash), :mod:`~protocol.errors` (the error
hierarchy mapped to ``ServerError``), :mod:`~protocol.limits`, :mod:`~protocol.admin_names`
(Pulsar's names for the admin API's enumerated values, shared with the command-line clients),
and :mod:`~protocol.pulsar_pb` (the generated ``protocol.generated.pulsar_api_pb2`` with a
typing stub, for mypy --strict).
"""
