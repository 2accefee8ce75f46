"""The publish guard (Pulsar's ``checkAndStartPublish`` step for delays): PIP-315 and PIP-437.

Theory of operation
-------------------
Core's ``Topic.publish`` calls :func:`check_and_start_publish` for persistent topics, with the
entry the producer sent, its already-parsed :class:`~protocol.metadata.EntryInfo` and the
topic's resolved :class:`~broker.delayed.policy.DelayPolicy`, before appending.

1. Fast path: policy inactive, or neither a max nor a fixed delay in force: the entry is
   returned as is, nothing is parsed or allocated beyond the result.
2. Fixed delay (PIP-437) in force: ``deliver_at_time = publish_time + fixed`` for every
   message, whatever the client asked; the max delay is not applied. The metadata is rewritten
   (:func:`protocol.metadata.rewrite_deliver_at`: new bytes, so the stored entry and every
   MESSAGE carry a CRC32C computed over the rewritten bytes). ``overridden`` is True exactly
   when the client had set a ``deliver_at_time`` and it differed from the fixed one: the
   message counted in ``pulsar_broker_topic_messages_fixed_delay_overridden_total``. A message
   without a client delay is rewritten but not counted; one whose client delay already equals
   the fixed one is stored untouched and not counted.
3. Max delay (PIP-315) in force: ``deliver_at_time - publish_time > max`` (the producer's
   publish time, not broker time, as upstream) raises
   ``NotAllowedError("Exceeds max allowed delivery delay of N milliseconds")``; the caller
   answers SEND_ERROR, stores nothing and counts
   ``pulsar_broker_topic_messages_delayed_rejected_total``.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.delayed.policy import DelayPolicy
from protocol.errors import NotAllowedError
from protocol.metadata import EntryInfo, rewrite_deliver_at


@dataclass(frozen=True, slots=True)
class GuardResult:
    """The entry to store (possibly rewritten) and whether a client delay was overridden."""

    entry: bytes
    overridden: bool


def max_delay_message(max_delay_ms: int) -> str:
    """Pulsar's exact SEND_ERROR text for a PIP-315 rejection."""
    return f"Exceeds max allowed delivery delay of {max_delay_ms} milliseconds"


def check_and_start_publish(entry: bytes, info: EntryInfo, policy: DelayPolicy) -> GuardResult:
    """Apply the topic's max/fixed delay to one entry (see the module docstring)."""
    if not policy.active:
        return GuardResult(entry, False)
    fixed = policy.fixed_delay_ms
    if fixed > 0:
        deliver_at = info.publish_time + fixed
        client_at = info.deliver_at_time
        if client_at == deliver_at:
            return GuardResult(entry, False)
        return GuardResult(rewrite_deliver_at(entry, deliver_at), client_at is not None)
    max_delay = policy.max_delay_ms
    if (max_delay > 0 and info.deliver_at_time is not None
            and info.deliver_at_time - info.publish_time > max_delay):
        raise NotAllowedError(max_delay_message(max_delay))
    return GuardResult(entry, False)
