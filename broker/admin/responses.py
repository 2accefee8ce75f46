"""What every admin REST handler shares: the admin service of the request's app, the namespace or
topic its path names, and the replies.

Theory of operation: :func:`broker.admin.app.create_app` stores one
:class:`broker.admin.service.AdminService` under ``ADMIN_KEY``; handlers reach the broker only
through :func:`admin_of`. :func:`namespace_of`, :func:`topic_of` and :func:`policy_topic_of`
are the preambles of the handlers under ``/{tenant}/{namespace}``: each answers Pulsar's 404
``Namespace does not exist`` before anything else is read. Successful answers are a JSON document (:func:`json_response`; no
value, such as a policy that is not set, is Pulsar's 200 with an empty body, which its clients
read as "none" where ``null`` would be an empty policy object) or Pulsar's bare
``204 No Content`` (:func:`no_content`); errors are raised as
:class:`broker.admin.errors.RestError` and rendered by the error middleware, not here.
"""

from __future__ import annotations

import json

from aiohttp import web

from broker.admin.service import ADMIN_KEY, PERSISTENT, AdminService, topic_name
from broker.topics.names import TopicName

__all__ = ["admin_of", "json_response", "namespace_of", "no_content", "policy_topic_of", "topic_of"]


def admin_of(request: web.Request) -> AdminService:
    """The admin service of the app serving *request*."""
    return request.app[ADMIN_KEY]


async def namespace_of(request: web.Request) -> tuple[AdminService, str]:
    """The admin service and the path's ``tenant/namespace``, which must exist."""
    admin = admin_of(request)
    tenant, ns = request.match_info["tenant"], request.match_info["namespace"]
    await admin.tenants.require_namespace(tenant, ns)
    return admin, f"{tenant}/{ns}"


async def topic_of(request: web.Request,
                   domain: str = PERSISTENT) -> tuple[AdminService, TopicName]:
    """The admin service and the path's topic, whose namespace must exist (the topic need not)."""
    admin, _ = await namespace_of(request)
    m = request.match_info
    return admin, topic_name(m["tenant"], m["namespace"], m["topic"], domain)


async def policy_topic_of(request: web.Request) -> tuple[AdminService, TopicName]:
    """:func:`topic_of`, refused as Pulsar refuses a topic-level policy on a partition."""
    admin, tn = await topic_of(request)
    await admin.topics.require_policy_topic(tn)
    return admin, tn


def json_response(value: object, status: int = 200) -> web.Response:
    if value is None:
        return web.Response(status=status)
    return web.Response(status=status, text=json.dumps(value), content_type="application/json")


def no_content() -> web.Response:
    return web.Response(status=204)
