"""Types of the C twins of storage.segments._scan_in_order and _data_end and of
storage.read_fds.ReadFds.read_records_py (storage/_scan_accel.c)."""

from array import array
from collections.abc import Callable
from typing import Any

def scan_in_order(
    reference: Callable[..., tuple[int, int, int]], crc32c: Callable[..., int],
    max_record_bytes: int, joined_crc_bytes: int, buf: Any, size: int, off: int,
    data_end: int, last_id: int, bias: int, ident: int | None, offsets: array[int],
    lengths: array[int], /,
) -> tuple[int, int, int]: ...

def data_end(reference: Callable[..., int], buf: Any, start: int, size: int, /) -> int: ...

def read_records(
    reference: Callable[..., tuple[list[bytes | None], int]], crc32c: Callable[..., int],
    fd: int, records: list[tuple[int, int, int]], bias: int, ident: int | None, budget: int,
    found_any: bool, max_read_bytes: int, /,
) -> tuple[list[bytes | None], int]: ...
