"""One mapping from every exception to OpenAI's error envelope and the right status."""

from __future__ import annotations

import logging
from typing import Any

from litestar import MediaType, Request, Response
from litestar.exceptions import HTTPException, ValidationException
from litestar.openapi import ResponseSpec

from gateway.errors import AuthenticationError, GatewayError, QueueFullError, ShuttingDownError
from gateway.protocol.openai import ErrorDetail, ErrorResponse

log = logging.getLogger(__name__)

_TYPES_BY_STATUS = {
    401: "invalid_request_error",
    404: "invalid_request_error",
    429: "rate_limit_error",
}


def envelope(
    status: int,
    message: str,
    *,
    error_type: str | None = None,
    param: str | None = None,
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> Response[ErrorResponse]:
    if error_type is None:
        error_type = "invalid_request_error" if status < 500 else "server_error"
    body = ErrorResponse(
        error=ErrorDetail(message=message, type=error_type, param=param, code=code)
    )
    return Response(body, status_code=status, media_type=MediaType.JSON, headers=headers)


def gateway_error_body(exc: GatewayError) -> ErrorResponse:
    return ErrorResponse(
        error=ErrorDetail(message=exc.message, type=exc.error_type, param=exc.param, code=exc.code)
    )


def handle_gateway_error(_: Request[Any, Any, Any], exc: GatewayError) -> Response[ErrorResponse]:
    headers: dict[str, str] = {}
    if isinstance(exc, QueueFullError | ShuttingDownError):
        headers["Retry-After"] = str(exc.retry_after)
    if isinstance(exc, AuthenticationError):
        headers["WWW-Authenticate"] = 'Bearer realm="onemac-gateway"'
    return envelope(
        exc.status_code,
        exc.message,
        error_type=exc.error_type,
        param=exc.param,
        code=exc.code,
        headers=headers or None,
    )


MAPPING_FIELDS = frozenset({"logit_bias", "args", "metadata"})


def _param_from_key(key: str | None) -> str | None:
    # Litestar reports pydantic locations as "messages.0.role"; OpenAI uses "messages[0].role".
    if not key:
        return None
    parts = key.split(".")
    if parts[0] in MAPPING_FIELDS:  # a client's own keys are not part of the name
        return parts[0]
    out = parts[0]
    for part in parts[1:]:
        out += f"[{part}]" if part.isdigit() else f".{part}"
    return out


def handle_validation_error(
    _: Request[Any, Any, Any], exc: ValidationException
) -> Response[ErrorResponse]:
    details = exc.extra if isinstance(exc.extra, list) else []
    if not details:
        # Litestar raises this for bodies that are not JSON at all.
        return envelope(400, f"We could not parse the JSON body of your request. ({exc.detail})")
    first = details[0] if isinstance(details[0], dict) else {}
    param = _param_from_key(first.get("key"))
    message = first.get("message", exc.detail)
    if param:
        message = f"Invalid value for '{param}': {message}"
    if len(details) > 1:
        message += f" (and {len(details) - 1} more problem(s))"
    return envelope(400, message, param=param, code="invalid_value")


def handle_http_exception(_: Request[Any, Any, Any], exc: HTTPException) -> Response[ErrorResponse]:
    status = exc.status_code
    message = exc.detail or "error"
    if status == 413:
        message = f"Request body too large: {message}"
    if status >= 500:
        log.error("HTTP %s: %s", status, message)
    # Litestar's own headers (a 405's Allow) are kept.
    headers = {str(k): str(v) for k, v in (exc.headers or {}).items()} or None
    return envelope(status, message, error_type=_TYPES_BY_STATUS.get(status), headers=headers)


def handle_too_deep(_: Request[Any, Any, Any], exc: RecursionError) -> Response[ErrorResponse]:
    # The JSON decoder bounds its own recursion and raises this: the body nests too deeply.
    return envelope(400, "The JSON body is nested too deeply.", code="json_too_deep")


def handle_unexpected(_: Request[Any, Any, Any], exc: Exception) -> Response[ErrorResponse]:
    log.exception("unexpected error", exc_info=exc)
    return envelope(500, "The server had an error while processing your request.")


EXCEPTION_HANDLERS: dict[type[Exception] | int, Any] = {
    GatewayError: handle_gateway_error,
    ValidationException: handle_validation_error,
    HTTPException: handle_http_exception,
    RecursionError: handle_too_deep,
    Exception: handle_unexpected,
}


ERROR_RESPONSES: dict[int, ResponseSpec] = {
    status: ResponseSpec(ErrorResponse, description=description)
    for status, description in {
        400: "Invalid request (OpenAI error envelope)",
        401: "Missing or wrong API key",
        404: "Unknown model or object",
        413: "Request body too large",
        422: "A task argument is missing, unknown, not a string or too long",
        429: "Queue full; see Retry-After",
        502: "An upstream server failed or answered badly",
        503: "Waited too long for the inference slot, or the memory budget is too small",
        504: "An upstream server did not answer in time",
    }.items()
}
