"""What a producer may take without :meth:`broker.topics.topic.Topic.check_publish`.

Theory of operation
-------------------
Most SENDs carry one message whose metadata the publish check's scan
(:func:`protocol.send_accel.scan_publish_metadata`) reads without protobuf. The topic states,
once per run of SENDs, the conditions under which its check would return such an entry
unchanged (:class:`SendBounds`, from :meth:`~broker.topics.topic.Topic.send_bounds`), and the
producer's run loop (:meth:`broker.topics.producer.Producer.on_sends`) takes each entry on those
alone:

- a plain message (the scan's ``SINGLE``: one message, no chunk, no ``deliver_at_time``, no
  length-delimited field) of at most ``plain`` bytes;
- one message with a deliver time or a key (a delayed SEND, a reschedule, a tombstone) of at
  most ``single`` bytes, when :func:`single_message` reads it as one message, not a chunk, and
  notes its deliver time in the topic's ``checked`` times, as the check itself notes it.

Each bound is -1 when some check could act on such an entry (the topic not open, a shadow,
encryption required, a fixed delivery delay; for ``single`` also the max-delay guard, which must
see every delayed entry). Both must stay the exact conditions under which ``check_publish``
returns ``(entry, 1, False)`` (tests/broker/test_broker_plain_sends.py checks them in every topic
state). Pure functions; the topic owns the state they read.
"""

from __future__ import annotations

from typing import Final, NamedTuple

from broker.delayed.known_times import CheckedTimes
from protocol.send_accel import scan_publish_metadata

__all__ = ["NO_BOUNDS", "SendBounds", "single_message"]


class SendBounds(NamedTuple):
    """A topic's fast-path conditions for one run of SENDs (module docstring)."""

    #: The largest plain entry (bytes) ``check_publish`` passes unchanged; -1: none.
    plain: int
    #: The largest one-message entry :func:`single_message` may take; -1: none.
    single: int
    #: The broker's ``maxMessageSize`` (the scan bounds a chunked message by it).
    max_message_size: int
    #: Where ``check_publish`` notes the deliver times it found (None: a topic without).
    checked: CheckedTimes | None


NO_BOUNDS: Final = SendBounds(-1, -1, 0, None)
"""Every SEND through ``check_publish``."""


def single_message(entry: bytes, bounds: SendBounds) -> bool:
    """For an entry of at most ``bounds.single`` bytes whose SEND says it holds one message:
    True when ``check_publish`` would return ``(entry, 1, False)`` -- the scan reads one
    message, not a chunk, with or without ``deliver_at_time`` -- and then its deliver time is
    noted in ``bounds.checked`` as that check notes it; False: the check must judge it."""
    scanned = scan_publish_metadata(entry, bounds.max_message_size)
    if scanned is None or scanned[0] != 1 or scanned[1]:
        return False
    checked = bounds.checked
    if checked is not None:
        checked.note(entry, scanned[2])
    return True
