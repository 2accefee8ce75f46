"""What every admin REST handler shares: the admin service of the request's app, and the replies.

Theory of operation: :func:`broker.admin.app.create_app` stores one
:class:`broker.admin.service.AdminService` under ``ADMIN_KEY``; handlers reach the broker only
through :func:`admin_of`. Successful answers are a JSON document (:func:`json_response`; no
value, such as a policy that is not set, is Pulsar's 200 with an empty body, which its clients
read as "none" where ``null`` would be an empty policy object) or Pulsar's bare
``204 No Content`` (:func:`no_content`); errors are raised as
:class:`broker.admin.errors.RestError` and rendered by the error middleware, not here.
"""

from __future__ import annotations

import json

from aiohttp import web

from broker.admin.service import ADMIN_KEY, AdminService

__all__ = ["admin_of", "json_response", "no_content"]


def admin_of(request: web.Request) -> AdminService:
    """The admin service of the app serving *request*."""
    return request.app[ADMIN_KEY]


def json_response(value: object, status: int = 200) -> web.Response:
    if value is None:
        return web.Response(status=status)
    return web.Response(status=status, text=json.dumps(value), content_type="application/json")


def no_content() -> web.Response:
    return web.Response(status=204)
