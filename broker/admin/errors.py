"""REST errors: Pulsar's status codes and ``{"reason": "..."}`` bodies.

Theory of operation: handlers raise :class:`RestError` (status + reason, Pulsar's texts) or
let a service exception escape; :func:`error_middleware` is the ONE place that turns either
into a JSON error response, so every error body has the same shape whatever raised it.
Service exceptions are mapped by type (``protocol.errors`` classes, ``ValueError``); storage's
exceptions first through :func:`broker.topics.storage_errors.storage_failure`; anything
unexpected becomes a 500 with the exception text, logged with its traceback.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from broker.topics.policies import PolicyLimitError
from broker.topics.storage_errors import StorageOp, storage_failure
from protocol import errors as perr
from storage.errors import StorageError

log = logging.getLogger("horae.admin.errors")

# Pulsar's reason texts (PersistentTopicsBase / NamespacesBase / TenantsBase).
TOPIC_NOT_FOUND = "Topic not found"
PARTITIONED_NAME_WITH_SUFFIX = "Partitioned Topic Name should not contain '-partition-'"
SUBSCRIPTION_NOT_FOUND = "Subscription not found"
NAMESPACE_NOT_FOUND = "Namespace does not exist"
TENANT_NOT_FOUND = "Tenant does not exist"
PARTITIONED_TOPIC_NOT_FOUND = "Partitioned topic does not exist"
TOPIC_EXISTS = "This topic already exists"
PARTITIONED_TOPIC_EXISTS = "Partitioned topic already exists"
TENANT_EXISTS = "Tenant already exists"
CLUSTERS_NOT_FOUND = "Clusters do not exist"
NAMESPACE_EXISTS = "Namespace already exists"
SUBSCRIPTION_EXISTS = "Subscription already exists for topic"
TENANT_NOT_EMPTY = "The tenant still has active namespaces"
NAMESPACE_NOT_EMPTY = "Cannot delete non empty namespace"
TOPIC_BUSY = "Topic has active producers/subscriptions"
SUBSCRIPTION_BUSY = "Subscription has active connected consumers"
PARTITIONS_NOT_POSITIVE = "Number of partitions should be more than 0"


class RestError(Exception):
    """An HTTP error with Pulsar's status code and reason text."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def not_found(reason: str) -> RestError:
    return RestError(404, reason)


def conflict(reason: str) -> RestError:
    return RestError(409, reason)


def bad_request(reason: str) -> RestError:
    return RestError(400, reason)


def precondition_failed(reason: str) -> RestError:
    return RestError(412, reason)


def not_allowed(reason: str) -> RestError:
    return RestError(405, reason)


def json_error(status: int, reason: str) -> web.Response:
    return web.Response(status=status, text=json.dumps({"reason": reason}),
                        content_type="application/json")


def _from_service_error(exc: Exception) -> RestError | None:
    """Map an exception raised by the broker service to Pulsar's REST answer, if known."""
    if isinstance(exc, perr.TopicNotFoundError):
        return not_found(TOPIC_NOT_FOUND)
    if isinstance(exc, perr.SubscriptionNotFoundError):
        return not_found(SUBSCRIPTION_NOT_FOUND)
    if isinstance(exc, perr.InvalidTopicNameError):
        return precondition_failed(exc.message or "Topic name is not valid")
    if isinstance(exc, PolicyLimitError):
        return precondition_failed(exc.message)
    if isinstance(exc, perr.NotAllowedError):
        return not_allowed(exc.message)
    if isinstance(exc, perr.ConsumerBusyError):
        return precondition_failed(SUBSCRIPTION_BUSY)
    if isinstance(exc, perr.ServiceNotReadyError):
        return RestError(503, exc.message or "Service not ready")
    if isinstance(exc, perr.RequestError):
        return RestError(500, exc.message)
    return None


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except RestError as exc:
        return json_error(exc.status, exc.reason)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        # aiohttp's own 404/405 for unknown paths: same body shape as everything else.
        return json_error(exc.status, exc.reason)
    except StorageError as exc:
        mapped = _from_service_error(storage_failure(exc, StorageOp.ADMIN).error)
        assert mapped is not None   # every storage failure maps to a RequestError
        return json_error(mapped.status, mapped.reason)
    except Exception as exc:
        mapped = _from_service_error(exc)
        if mapped is not None:
            return json_error(mapped.status, mapped.reason)
        log.exception("admin request %s %s failed", request.method, request.path)
        return json_error(500, str(exc) or type(exc).__name__)
