"""``PUT|GET /admin/v2/persistent/{tenant}/{namespace}/{topic}/compaction``: trigger and status.

Theory of operation: PUT starts a compaction run on the topic (on every partition of a
partitioned topic, as Pulsar fans out) and answers 204 at once; 409 "Compaction already in
progress" when one is running. GET answers Pulsar's LongRunningProcessStatus,
``{"status": "NOT_RUN"|"RUNNING"|"SUCCESS"|"ERROR", "lastError": ""}`` (for a partitioned
topic: RUNNING while any partition runs, else ERROR if any failed, else SUCCESS if any ran).
The runs themselves are :class:`broker.topics.compaction.TopicCompaction`'s.
"""

from __future__ import annotations

from aiohttp import web

from broker.admin import errors as E
from broker.admin.responses import admin_of, json_response, no_content
from broker.admin.service import topic_name
from broker.admin.topics import TOPIC
from broker.topics.topic import Topic

__all__ = ["add_routes"]

IN_PROGRESS = "Compaction already in progress"


async def _targets(request: web.Request) -> list[Topic]:
    admin = admin_of(request)
    m = request.match_info
    await admin.tenants.require_namespace(m["tenant"], m["namespace"])
    return await admin.topics.targets(topic_name(m["tenant"], m["namespace"], m["topic"]))


async def trigger(request: web.Request) -> web.Response:
    topics = await _targets(request)
    if any(t.compaction.running for t in topics):
        raise E.conflict(IN_PROGRESS)
    for t in topics:
        t.compaction.trigger()
    return no_content()


async def status(request: web.Request) -> web.Response:
    docs = [t.compaction.status_doc() for t in await _targets(request)]
    for state in ("RUNNING", "ERROR", "SUCCESS"):
        for doc in docs:
            if doc["status"] == state:
                return json_response(doc)
    return json_response({"status": "NOT_RUN", "lastError": ""})


def add_routes(app: web.Application) -> None:
    app.router.add_put(TOPIC + "/compaction", trigger)
    app.router.add_get(TOPIC + "/compaction", status)
