"""The publish guard (Pulsar's ``checkAndStartPublish`` step for delays): PIP-315 and PIP-437.

Theory of operation
-------------------
Core's ``Topic.publish`` calls :func:`check_and_start_publish` for persistent topics, with the
entry the producer sent, its already-parsed :class:`~protocol.metadata.EntryInfo` (and the
parsed MessageMetadata it came from, so a rewrite does not parse again) and the topic's
resolved :class:`~broker.delayed.policy.DelayPolicy`, before appending.

1. Fast path: policy inactive, or neither a max nor a fixed delay in force: the entry is
   returned as is, nothing is parsed or allocated beyond the result.
2. Fixed delay (PIP-437) in force: ``deliver_at_time = publish_time + fixed`` for every
   message, whatever the client asked; the max delay is not applied. The metadata is rewritten
   (:func:`protocol.metadata.rewrite_deliver_at`: new bytes, so the stored entry and every
   MESSAGE carry a CRC32C computed over the rewritten bytes). ``overridden`` is True exactly
   when the client had set a ``deliver_at_time`` and it differed from the fixed one: the
   messages counted in ``pulsar_broker_topic_messages_fixed_delay_overridden_total``. A message
   without a client delay is rewritten but not counted; one whose client delay already equals
   the fixed one is stored untouched and not counted.
3. Max delay (PIP-315) in force: ``deliver_at_time - publish_time > max`` (the producer's
   publish time, not broker time, as upstream) raises :class:`DelayTooLongError` (a
   ``NotAllowedError``, "Exceeds max allowed delivery delay of N milliseconds"); the caller
   answers SEND_ERROR, stores nothing and adds its ``messages`` to
   ``pulsar_broker_topic_messages_delayed_rejected_total``.

Total: nothing else is raised for any policy and any parsed entry. The rewritten time is
clamped to int64 (policies are bounded by :data:`~broker.delayed.policy.MAX_POLICY_DELAY_MS`
anyway); counters count messages (``num_messages_in_batch``), not entries.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.delayed.policy import DelayPolicy
from protocol import pulsar_pb as pb
from protocol.errors import NotAllowedError
from protocol.metadata import EntryInfo, rewrite_deliver_at

#: ``deliver_at_time`` is an int64 on the wire: a rewritten time is clamped to it.
INT64_MAX = (1 << 63) - 1


@dataclass(frozen=True, slots=True)
class GuardResult:
    """The entry to store (possibly rewritten) and how many of its messages had their client
    delay overridden (all of the entry's, or 0)."""

    entry: bytes
    overridden_messages: int

    @property
    def overridden(self) -> bool:
        return self.overridden_messages > 0


class DelayTooLongError(NotAllowedError):
    """A PIP-315 rejection; ``messages`` is how many messages the refused entry held."""

    def __init__(self, message: str, messages: int) -> None:
        super().__init__(message)
        self.messages = messages


def max_delay_message(max_delay_ms: int) -> str:
    """Pulsar's exact SEND_ERROR text for a PIP-315 rejection."""
    return f"Exceeds max allowed delivery delay of {max_delay_ms} milliseconds"


def check_and_start_publish(entry: bytes, info: EntryInfo, policy: DelayPolicy,
                            metadata: pb.MessageMetadata | None = None) -> GuardResult:
    """Apply the topic's max/fixed delay to one entry (see the module docstring). *metadata*
    is the entry's parsed metadata when the caller has it (a rewrite then parses nothing
    again; it is changed in place)."""
    if not policy.active:
        return GuardResult(entry, 0)
    fixed = policy.fixed_delay_ms
    if fixed > 0:
        deliver_at = min(info.publish_time + fixed, INT64_MAX)
        client_at = info.deliver_at_time
        if client_at == deliver_at:
            return GuardResult(entry, 0)
        overridden = info.messages if client_at is not None else 0
        return GuardResult(rewrite_deliver_at(entry, deliver_at, metadata), overridden)
    max_delay = policy.max_delay_ms
    if (max_delay > 0 and info.deliver_at_time is not None
            and info.deliver_at_time - info.publish_time > max_delay):
        raise DelayTooLongError(max_delay_message(max_delay), info.messages)
    return GuardResult(entry, 0)
