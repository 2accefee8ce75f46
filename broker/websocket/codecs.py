"""Pulsar's payload compressions, both ways, for the WebSocket service.

Theory of operation
-------------------
A WebSocket client sends and receives payloads in the clear (JSON, base64); the service is the
Pulsar client in between, so it compresses what a producer session asks for
(``compressionType``) and decompresses what a consumer or reader session receives from any
other client. The formats are the Java client's, which every official client matches:
``ZLIB`` is a zlib stream, ``LZ4`` a raw LZ4 block (no frame, no stored size), ``ZSTD`` a
Zstandard frame and ``SNAPPY`` raw Snappy; the uncompressed size travels in the message
metadata (``uncompressed_size``) and is checked on the way back. LZ4, ZSTD and Snappy come
from ``cramjam`` (one maintained wheel for the three), imported on the first payload that needs
it (a broker whose WebSocket clients never compress does not map its 1.7 MiB library); ZLIB
from the standard library.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from types import ModuleType

from protocol import pulsar_pb as pb

__all__ = ["COMPRESSIONS", "compress", "decompress"]

#: ``compressionType`` names (Pulsar's) -> the metadata's enum.
COMPRESSIONS: dict[str, int] = {"NONE": pb.NONE, "LZ4": pb.LZ4, "ZLIB": pb.ZLIB,
                                "ZSTD": pb.ZSTD, "SNAPPY": pb.SNAPPY}

def _cramjam() -> ModuleType:
    import cramjam

    return cramjam


_COMPRESS: dict[int, Callable[[bytes], bytes]] = {
    pb.ZLIB: zlib.compress,
    pb.LZ4: lambda data: bytes(_cramjam().lz4.compress_block(data, store_size=False)),
    pb.ZSTD: lambda data: bytes(_cramjam().zstd.compress(data)),
    pb.SNAPPY: lambda data: bytes(_cramjam().snappy.compress_raw(data)),
}


def _inflate(data: bytes, size: int) -> bytes:
    inflater = zlib.decompressobj()
    out = inflater.decompress(data, size)
    if inflater.unconsumed_tail:
        raise ValueError("ZLIB payload inflates to more than its uncompressed size")
    return out


_DECOMPRESS: dict[int, Callable[[bytes, int], bytes]] = {
    pb.ZLIB: _inflate,
    pb.LZ4: lambda data, size: bytes(_cramjam().lz4.decompress_block(data, output_len=size)),
    pb.ZSTD: lambda data, size: bytes(_cramjam().zstd.decompress(data, output_len=size)),
    pb.SNAPPY: lambda data, size: bytes(_cramjam().snappy.decompress_raw(data)),
}


def compress(compression: int, payload: bytes) -> bytes:
    """*payload* compressed with *compression* (an enum of :data:`COMPRESSIONS`)."""
    if compression == pb.NONE or not payload:
        return payload
    return _COMPRESS[compression](payload)


def decompress(compression: int, payload: bytes, size: int) -> bytes:
    """*payload* decompressed to its *size* bytes. Raises ValueError (a corrupt payload, a
    size that does not match) or KeyError (a compression Pulsar does not define)."""
    if compression == pb.NONE:
        return payload
    if size < 0:
        raise ValueError(f"bad uncompressed size {size}")
    try:
        data = _DECOMPRESS[compression](payload, size)
    except _cramjam().DecompressionError as exc:
        raise ValueError(f"corrupt payload: {exc}") from exc
    if len(data) != size:
        raise ValueError(f"payload decompresses to {len(data)} bytes, not {size}")
    return data
