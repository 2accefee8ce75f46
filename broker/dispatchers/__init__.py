"""Dispatchers, one module per subscription type (see :mod:`broker.dispatchers.base`)."""

from __future__ import annotations

from broker.dispatchers.base import Dispatcher
from broker.dispatchers.key_shared import KeySharedDispatcher
from broker.dispatchers.shared import SharedDispatcher
from broker.dispatchers.single import SingleActiveDispatcher

__all__ = ["Dispatcher", "KeySharedDispatcher", "SharedDispatcher", "SingleActiveDispatcher"]
