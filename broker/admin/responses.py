"""What every admin REST handler shares: the facade of the request's app, and the replies.

Theory of operation: :func:`broker.admin.app.create_app` stores one
:class:`broker.admin.facade.AdminFacade` under ``ADMIN_KEY``; handlers reach the broker only
through :func:`facade_of`. Successful answers are a JSON document (:func:`json_response`) or
Pulsar's bare ``204 No Content`` (:func:`no_content`); errors are raised as
:class:`broker.admin.errors.RestError` and rendered by the error middleware, not here.
"""

from __future__ import annotations

import json

from aiohttp import web

from broker.admin.facade import ADMIN_KEY, AdminFacade

__all__ = ["facade_of", "json_response", "no_content"]


def facade_of(request: web.Request) -> AdminFacade:
    """The admin facade of the app serving *request*."""
    facade: AdminFacade = request.app[ADMIN_KEY]
    return facade


def json_response(value: object, status: int = 200) -> web.Response:
    return web.Response(status=status, text=json.dumps(value), content_type="application/json")


def no_content() -> web.Response:
    return web.Response(status=204)
