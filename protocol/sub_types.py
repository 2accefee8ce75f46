"""Pulsar's subscription types: the ``CommandSubscribe.SubType`` wire enum, named.

One definition for the broker (consumers, subscriptions, dispatchers, admin stats): the member
names are Pulsar's own spellings (``SubType.Key_Shared.name == "Key_Shared"``, what the admin
stats and CONSUMER_STATS report), the values the wire values (a test pins them to
``pb.CommandSubscribe``). Pure data: no IO.
"""

from __future__ import annotations

from enum import IntEnum

__all__ = ["SubType"]


class SubType(IntEnum):
    """``CommandSubscribe.SubType``."""

    Exclusive = 0
    Shared = 1
    Failover = 2
    Key_Shared = 3

    @property
    def shares_messages(self) -> bool:
        """Shared and Key_Shared spread messages over many consumers (delayed delivery,
        unacked limits and cancels apply); Exclusive and Failover have one active consumer."""
        return self in (SubType.Shared, SubType.Key_Shared)

    @property
    def single_active(self) -> bool:
        """Exclusive and Failover: one consumer receives everything (cumulative acks allowed)."""
        return not self.shares_messages
