"""Shadow topics over REST: the source's ``shadowTopics`` policy and the checks of a shadow's creation.

Theory of operation: Pulsar's paths, bodies and answers (``PersistentTopics`` /
``PersistentTopicsBase.internalSetShadowTopic``, ``validateShadowTopics``,
``internalDeleteShadowTopics``):

- ``GET|PUT|DELETE /admin/v2/persistent/{t}/{ns}/{topic}/shadowTopics`` on the *source*: a
  local topic policy (a JSON list of topic names, kept as given). The topic must exist and not
  be a partition (the topic-policy checks of every topic policy); PUT refuses an empty list
  (412 ``Cannot specify empty shadow topics, please use remove command instead.``), a name
  that is not a topic name (403 ``Invalid shadow topic name: x``), a non-persistent one (412
  ``Only persistent topic can be set as shadow topic``) and one that does not exist (412
  ``Shadow topic [x] not exists.``). GET answers the list, or an empty 200 while unset;
  DELETE removes it (204).
- A shadow topic is created by ``PUT .../{topic}`` (or ``.../partitions``) with the property
  ``PULSAR.SHADOW_SOURCE`` (what PulsarAdmin's ``createShadowTopic`` sends):
  :func:`check_shadow_create` refuses a source that is not a persistent topic name, that
  does not exist (for a partitioned shadow: that is not a partitioned topic); a shadow may be
  the source of another, as Pulsar creates one. ``get-shadow-source`` is the property read back (``GET .../properties``).
- Deleting a source whose ``shadowTopics`` lists shadows is refused without ``force``, 422
  ``Delete forbidden. Topic {name} is replicated to shadow topics.`` as Pulsar refuses it
  (:func:`check_source_delete`).

Who may: a tenant admin (Pulsar's ``validateTopicPolicyOperation(SHADOW_TOPIC)``); the
default of :func:`broker.admin.auth.check_access` for topic routes.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from broker.admin import bodies
from broker.admin import errors as E
from broker.admin.responses import json_response, no_content, policy_topic_of
from broker.admin.service import AdminService
from broker.topics.names import TopicName
from broker.topics.shadows import SHADOW_SOURCE_KEY, SHADOW_TOPICS, shadow_topics_of
from protocol.errors import InvalidTopicNameError

__all__ = ["add_routes", "check_shadow_create", "check_source_delete"]

TOPIC = "/admin/v2/persistent/{tenant}/{namespace}/{topic}"

EMPTY_SHADOW_TOPICS = "Cannot specify empty shadow topics, please use remove command instead."
NOT_PERSISTENT_SHADOW = "Only persistent topic can be set as shadow topic"
SOURCE_NOT_PERSISTENT = "Source topic must be persistent"


async def _exists(admin: AdminService, tn: TopicName) -> bool:
    return await admin.topics.partition_count(tn) > 0 or await admin.topics.exists(tn)


def _parse_names(body: Any) -> list[str]:
    """A ``List<String>`` body; ``null`` is the empty list (refused with Pulsar's 412)."""
    if body is None:
        return []
    if not isinstance(body, list) or not all(isinstance(x, str) for x in body):
        raise E.bad_request("Invalid shadow topics: expected a list of topic names")
    return list(body)


async def get_shadow_topics(request: web.Request) -> web.Response:
    admin, tn = await policy_topic_of(request)
    # unset: an empty 200, as Pulsar answers its null
    return json_response(admin.policy_store.records.topic(tn.full).get(SHADOW_TOPICS))


async def set_shadow_topics(request: web.Request) -> web.Response:
    body = bodies.load_json(await request.read())
    admin, tn = await policy_topic_of(request)
    names = _parse_names(body)
    if not names:
        raise E.precondition_failed(EMPTY_SHADOW_TOPICS)
    for name in names:
        try:
            shadow = TopicName.parse(name)
        except InvalidTopicNameError:
            raise E.RestError(403, f"Invalid shadow topic name: {name}") from None
        if not shadow.is_persistent:
            raise E.precondition_failed(NOT_PERSISTENT_SHADOW)
    for name in names:
        if not await _exists(admin, TopicName.parse(name)):
            raise E.precondition_failed(f"Shadow topic [{name}] not exists.")
    await admin.policy_store.records.set_topic_field(tn.full, SHADOW_TOPICS, names)
    return no_content()


async def remove_shadow_topics(request: web.Request) -> web.Response:
    admin, tn = await policy_topic_of(request)
    await admin.policy_store.records.remove_topic_field(tn.full, SHADOW_TOPICS)
    return no_content()


async def check_shadow_create(admin: AdminService, tn: TopicName, properties: dict[str, str],
                              *, partitioned: bool) -> bool:
    """Whether the topic *tn* being created with *properties* is a shadow topic; raises the
    refusal when its source cannot be shadowed (see the module docstring)."""
    name = properties.get(SHADOW_SOURCE_KEY)
    if name is None:
        return False
    try:
        source = TopicName.parse(name)
    except InvalidTopicNameError:
        raise E.precondition_failed(f"Invalid shadow source topic name: {name}") from None
    if not source.is_persistent or not tn.is_persistent:
        raise E.precondition_failed(SOURCE_NOT_PERSISTENT)
    if source.full == tn.full:
        raise E.precondition_failed("A topic cannot be the shadow of itself")
    count = await admin.topics.partition_count(source)
    if partitioned and count == 0:
        raise E.not_found(f"Partitioned topic {source.full} not found")
    if not partitioned and (count > 0 or not await admin.topics.exists(source)):
        raise E.not_found(f"Topic {source.full} not found")
    return True


def check_source_delete(admin: AdminService, tn: TopicName) -> None:
    """Refuse deleting a source whose ``shadowTopics`` lists shadows (without force)."""
    if shadow_topics_of(admin.policy_store.records, tn.full):
        raise E.RestError(
            422, f"Delete forbidden. Topic {tn.full} is replicated to shadow topics.")


def add_routes(app: web.Application) -> None:
    r = app.router
    r.add_get(TOPIC + "/shadowTopics", get_shadow_topics)
    r.add_put(TOPIC + "/shadowTopics", set_shadow_topics)
    r.add_delete(TOPIC + "/shadowTopics", remove_shadow_topics)
