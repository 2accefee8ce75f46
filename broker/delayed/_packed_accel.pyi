"""Types of the C twin of PackedTimeIndex.push_run's loop and of the timerfd calls
(broker/delayed/_packed_accel.c)."""

from array import array
from collections.abc import Sequence
from typing import Any

def insert_run(index: Any, ts_cols: list[array[int]], pos_cols: list[array[int]],
               maxes: list[int], times: Sequence[int], packed: Sequence[int], /,
               ) -> tuple[int, list[int]]: ...

def timerfd_open() -> int: ...

def timerfd_arm(fd: int, epoch_ns: int, /) -> None: ...
