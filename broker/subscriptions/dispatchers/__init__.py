"""Dispatchers, one module per subscription type (see :mod:`broker.subscriptions.dispatchers.base`)."""

from __future__ import annotations

from broker.subscriptions.dispatchers.base import Dispatcher
from broker.subscriptions.dispatchers.key_shared import KeySharedDispatcher
from broker.subscriptions.dispatchers.shared import SharedDispatcher
from broker.subscriptions.dispatchers.single import SingleActiveDispatcher

__all__ = ["Dispatcher", "KeySharedDispatcher", "SharedDispatcher", "SingleActiveDispatcher"]
