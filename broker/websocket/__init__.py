"""Pulsar's WebSocket API on the web port (``webSocketServiceEnabled``).

Parts: :mod:`~broker.websocket.routes` (paths, authentication, authorization, the upgrade),
:mod:`~broker.websocket.producer` and :mod:`~broker.websocket.consumer` (the sessions),
:mod:`~broker.websocket.session` (what sessions share), :mod:`~broker.websocket.frames` (the
JSON shapes), :mod:`~broker.websocket.params` (query parameters) and
:mod:`~broker.websocket.link` (the in-process binary connection each session drives the broker
through).
"""
