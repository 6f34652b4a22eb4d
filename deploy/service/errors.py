"""API errors: one JSON shape for `/api` and `/v1` (OpenAI's), and domain exceptions mapped to an
HTTP status and a message written for the person calling."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from chat.backends import BackendError, BackendUnavailable
from chat.inflight import ServiceClosing
from chat.notices import model_failure, reference_for
from deploy.service.state import Services
from store import InvalidInput, NotFound, StoreError
from store.attributes import InvalidAttributes


class ApiError(Exception):
    def __init__(self, status: int, message: str, *, code: str, type_: str = "invalid_request_error",
                 param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.code, self.type, self.param = status, message, code, type_, param


def error_response(status: int, message: str, *, code: str, type_: str = "invalid_request_error",
                   param: str | None = None, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": type_, "code": code, "param": param}},
                        status_code=status, headers=headers)


def as_api_error(exc: Exception, reference: str | None = None) -> ApiError:
    """Domain exceptions → HTTP status and a message written for the person calling. A model
    failure's technical detail goes to the log under `reference` (chat.notices), not to the caller."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, NotFound):
        return ApiError(404, str(exc), code="not_found")
    if isinstance(exc, (InvalidInput, InvalidAttributes)):
        too_long = "limit is" in str(exc)
        return ApiError(413 if too_long else 400, str(exc), code="too_long" if too_long else "invalid_input")
    if isinstance(exc, ServiceClosing):
        return ApiError(503, str(exc), code="closing", type_="server_error")
    if isinstance(exc, BackendUnavailable):
        return ApiError(503, model_failure(exc, reference or reference_for()), code="model_unavailable",
                        type_="server_error")
    if isinstance(exc, BackendError):
        return ApiError(502, model_failure(exc, reference or reference_for()), code="model_error",
                        type_="server_error")
    if isinstance(exc, StoreError):
        return ApiError(500, str(exc), code="store_error", type_="server_error")
    if isinstance(exc, ValueError):  # e.g. SamplingParams' own checks
        return ApiError(400, str(exc), code="invalid_input")
    reference = reference or reference_for()
    return ApiError(500, f"Something went wrong on our side; it has been logged. Please try again. "
                         f"(Reference {reference}.)", code="internal", type_="server_error")

log = logging.getLogger("advisor.api")


def _validation_message(exc: RequestValidationError) -> tuple[str, str | None]:
    errors = exc.errors()
    if any(e.get("type") == "json_invalid" for e in errors):
        return "The request body is not valid JSON (UTF-8). Send a JSON object.", None
    parts, param = [], None
    for e in errors[:5]:
        loc = [str(p) for p in e.get("loc", ()) if p not in ("body", "query", "path")]
        param = param or ".".join(loc) or None
        parts.append(f"{'.'.join(loc) or 'body'}: {e.get('msg')}")
    return "Invalid request — " + "; ".join(parts), param


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, exc.message, code=exc.code, type_=exc.type, param=exc.param)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        services: Services = request.app.state.services
        services.metrics.record_error("invalid_input")
        message, param = _validation_message(exc)
        return error_response(400, message, code="invalid_request", param=param)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {401: "unauthorized", 404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return error_response(exc.status_code, str(exc.detail), code=code, headers=getattr(exc, "headers", None))

    async def _domain(request: Request, exc: Exception) -> JSONResponse:
        api_exc = as_api_error(exc)
        request.app.state.services.metrics.record_error(api_exc.code)
        return error_response(api_exc.status, api_exc.message, code=api_exc.code, type_=api_exc.type)

    # Domain errors are answered inside the app (ExceptionMiddleware); only true bugs reach the
    # catch-all below, which Starlette answers at the outermost layer and then logs.
    for cls in (StoreError, InvalidAttributes, BackendError, ServiceClosing):
        app.add_exception_handler(cls, _domain)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        reference = reference_for()
        api_exc = as_api_error(exc, reference)
        if api_exc.status >= 500 and api_exc.code == "internal":
            log.exception("unhandled error [reference %s] on %s %s", reference, request.method, request.url.path)
        request.app.state.services.metrics.record_error(api_exc.code)
        return error_response(api_exc.status, api_exc.message, code=api_exc.code, type_=api_exc.type)
