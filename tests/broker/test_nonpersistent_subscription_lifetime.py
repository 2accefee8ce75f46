"""A non-persistent topic's subscription lives while it has consumers, as in Pulsar 4.0: its
NonPersistentSubscription unsubscribes from the topic when its last consumer leaves, and
NonPersistentTopic.checkInactiveSubscriptions does nothing, so subscription expiration never
has an idle non-persistent subscription to delete. Seen through the official client and the
REST stats."""

from __future__ import annotations

from typing import Any

import pulsar
from conftest import make_client
from rest import http_json

TOPIC = "non-persistent://public/default/np-lifetime"
PATH = "/admin/v2/non-persistent/public/default/np-lifetime"
CONFIG = {"subscriptionExpirationTimeMinutes": 1}


def _subscriptions(broker: Any) -> dict[str, Any]:
    status, stats = http_json(broker.web_url, "GET", PATH + "/stats")
    assert status == 200, stats
    subs: dict[str, Any] = stats["subscriptions"]
    return subs


def test_a_subscription_goes_with_its_last_consumer(broker_factory: Any) -> None:
    broker = broker_factory(config_overrides=CONFIG)
    status, _ = http_json(broker.web_url, "POST",
                          "/admin/v2/namespaces/public/default/subscriptionExpirationTime", b"1")
    assert status == 204
    client = make_client(broker.service_url)
    try:
        first = client.subscribe(TOPIC, "shared", consumer_type=pulsar.ConsumerType.Shared)
        second = client.subscribe(TOPIC, "shared", consumer_type=pulsar.ConsumerType.Shared)
        reader = client.create_reader(TOPIC, pulsar.MessageId.latest)
        subs = _subscriptions(broker)
        assert len(subs["shared"]["consumers"]) == 2
        assert [s["isDurable"] for s in subs.values()] == [False, False]   # the reader's too
        assert len(subs) == 2

        first.close()          # one consumer left: the subscription stays
        subs = _subscriptions(broker)
        assert len(subs["shared"]["consumers"]) == 1

        second.close()         # the last one: gone at once, not left idle to expire
        assert "shared" not in _subscriptions(broker)
        reader.close()
        assert _subscriptions(broker) == {}
        status, names = http_json(broker.web_url, "GET", PATH + "/subscriptions")
        assert (status, names) == (200, [])
        # nor can an operator make one to linger: only a client makes one (Pulsar's 400)
        status, body = http_json(broker.web_url, "PUT", PATH + "/subscription/made")
        assert (status, body) == (400, {"reason": "Create subscription on non-persistent topic "
                                                  "can only be done through client"})
        # the expiration check has nothing to find on the topic
        expiry = broker.service.subscription_expiry
        assert broker.call(expiry.check, broker.service.topics) == 0

        # the name can be taken again, with another type: a new subscription
        again = client.subscribe(TOPIC, "shared", consumer_type=pulsar.ConsumerType.Exclusive)
        producer = client.create_producer(TOPIC)
        producer.send(b"after")
        assert again.receive(5000).data() == b"after"
        assert _subscriptions(broker)["shared"]["type"] == "Exclusive"
    finally:
        client.close()
