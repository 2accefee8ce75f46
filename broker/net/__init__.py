"""The binary-protocol side of a connection: frames in, commands dispatched, answers out.

:mod:`broker.net.connection` owns one TCP connection (its state table in
:mod:`broker.net.states`), its producers and its consumers; :mod:`broker.net.consumers`
handles the consumer commands, :mod:`broker.net.lookup` the URLs LOOKUP answers with.
This layer calls down into :mod:`broker.topics`; nothing below imports it.
"""

from __future__ import annotations
