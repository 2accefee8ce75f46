"""Admin REST bodies of the wrong JSON type answer 400, as Pulsar's JSON binding (Jackson)
answers them before its handler runs; values of the right type that a handler refuses stay 412.
And a policy that is not set reads as Pulsar answers it: 200 with an empty body (its clients read
"none"; a JSON null would be an empty policy object to some of them, the Go admin client's)."""

from __future__ import annotations

import urllib.request

from .conftest import Api

NS = "/admin/v2/namespaces/public/default"
T = "/admin/v2/persistent/public/default/typed"


def test_wrongly_typed_namespace_bodies_are_400(api: Api) -> None:
    for body in ({"max_producers_per_topic": "x"}, {"max_consumers_per_topic": 1.5},
                 {"auth_policies": "x"}, {"auth_policies": {"namespace_auth": {"r": "produce"}}}):
        reply = api("PUT", "/admin/v2/namespaces/public/typed", body)
        assert reply.status == 400, (body, reply)
    assert "public/typed" not in api("GET", "/admin/v2/namespaces/public").body
    negative = api("PUT", "/admin/v2/namespaces/public/typed", {"max_producers_per_topic": -1})
    assert (negative.status, negative.reason) == (412, "maxProducersPerTopic must be 0 or more")


def test_a_grant_that_is_not_a_list_is_400_an_unknown_action_412(api: Api) -> None:
    assert api("POST", NS + "/permissions/role-w", "produce").status == 400
    assert api("POST", NS + "/permissions/role-w", ["fly"]).status == 412
    assert "role-w" not in api("GET", NS + "/permissions").body


def test_a_backlog_quota_without_a_known_policy_is_400(api: Api) -> None:
    for body in ({"limitSize": 1, "limitTime": -1}, {"policy": "nope"},
                 {"limitSize": "x", "policy": "producer_request_hold"}):
        reply = api("POST", NS + "/backlogQuota", body)
        assert reply.status == 400, (body, reply)
    assert api("GET", NS + "/backlogQuotaMap").body == {}
    below = api("POST", NS + "/backlogQuota",
                {"limitSize": -5, "limitTime": -1, "policy": "producer_request_hold"})
    assert below.status == 412


def test_unset_policies_read_as_an_empty_200(broker: object, api: Api) -> None:
    assert api("PUT", T).status == 204
    for path in (NS + "/autoTopicCreation", NS + "/maxProducersPerTopic", NS + "/retention",
                 NS + "/delayedDelivery", NS + "/dispatchRate", T + "/maxProducers",
                 T + "/retention"):
        with urllib.request.urlopen(broker.web_url + path, timeout=10) as resp:  # type: ignore[attr-defined]
            assert (resp.status, resp.read()) == (200, b""), path
    assert api("POST", NS + "/autoTopicCreation",
               {"allowAutoTopicCreation": True, "topicType": "non-partitioned"}).status == 204
    assert api("GET", NS + "/autoTopicCreation").body == {
        "allowAutoTopicCreation": True, "topicType": "non-partitioned"}
    assert api("DELETE", NS + "/autoTopicCreation").status == 204
    gone = api("GET", NS + "/autoTopicCreation")
    assert (gone.status, gone.body) == (200, None)


def test_a_topics_applied_schema_strategy_is_the_one_in_force(api: Api) -> None:
    """Pulsar's ``?applied=true`` read resolves topic > namespace > broker (the Go admin
    client reads a topic's strategy that way)."""
    assert api("PUT", T + "-strategy").status == 204
    path = T + "-strategy/schemaCompatibilityStrategy"
    assert api("GET", path).body is None
    assert api("GET", path + "?applied=true").body == "FULL"  # the broker's default
    assert api("PUT", NS + "/schemaCompatibilityStrategy", "FORWARD").status == 204
    assert api("GET", path + "?applied=true").body == "FORWARD"
    assert api("PUT", path, "BACKWARD").status == 204
    assert (api("GET", path).body, api("GET", path + "?applied=true").body) == (
        "BACKWARD", "BACKWARD")
    assert api("DELETE", path).status == 204
    assert api("GET", path + "?applied=true").body == "FORWARD"
    assert api("DELETE", NS + "/schemaCompatibilityStrategy").status == 204
