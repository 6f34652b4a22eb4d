"""FastAPI dependencies of the route modules: the running services, the caller, the operator check."""

from __future__ import annotations

from fastapi import Request
from starlette.exceptions import HTTPException as StarletteHTTPException

from deploy.service.auth import Identity
from deploy.service.caller import identity_of
from deploy.service.errors import ApiError
from deploy.service.state import Services


def services_of(request: Request) -> Services:
    services: Services = request.app.state.services
    if services.store is None or services.backend is None:
        raise ApiError(503, "The service is still starting; try again in a moment.", code="starting",
                       type_="server_error")
    return services


def me(request: Request) -> Identity:
    return identity_of(request)


def admin(request: Request) -> Identity:
    ident = identity_of(request)
    if not ident.is_admin:
        raise StarletteHTTPException(
            401, "Operator endpoints need the admin token (Authorization: Bearer <server.admin_token>) "
                 "or an admin login at /signin.", headers={"WWW-Authenticate": "Bearer"},
        )
    return ident
