"""One mapping from every exception to an error envelope and the right status.

OpenAI's envelope everywhere, except on Anthropic's paths (``/v1/messages...``), where
Anthropic's clients expect ``{"type": "error", "error": {"type", "message"}}`` and its types.
"""

from __future__ import annotations

import logging
from typing import Any

from litestar import MediaType, Request, Response
from litestar.exceptions import HTTPException, ValidationException
from litestar.openapi import ResponseSpec

from gateway.errors import AuthenticationError, GatewayError, QueueFullError, ShuttingDownError
from gateway.protocol.anthropic import AnthropicError, AnthropicErrorDetail
from gateway.protocol.openai import ErrorDetail, ErrorResponse

log = logging.getLogger(__name__)

_TYPES_BY_STATUS = {
    401: "invalid_request_error",
    404: "invalid_request_error",
    429: "rate_limit_error",
}


ANTHROPIC_PATHS = "/v1/messages"
_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    422: "invalid_request_error",
    429: "rate_limit_error",
    503: "overloaded_error",
    529: "overloaded_error",
}


def anthropic_error_body(status: int, message: str, code: str | None = None) -> AnthropicError:
    """Anthropic's shape; the gateway's error code (if any) as ``details.error_code``, where
    Anthropic's SDKs look for codes they recover from (``thread_not_found``)."""
    kind = _ANTHROPIC_TYPES.get(status, "invalid_request_error" if status < 500 else "api_error")
    details = {"error_code": code} if code else None
    return AnthropicError(error=AnthropicErrorDetail(type=kind, message=message, details=details))


def envelope(
    status: int,
    message: str,
    *,
    error_type: str | None = None,
    param: str | None = None,
    code: str | None = None,
    headers: dict[str, str] | None = None,
    request: Request[Any, Any, Any] | None = None,
) -> Response[Any]:
    if request is not None and request.url.path.startswith(ANTHROPIC_PATHS):
        return Response(
            anthropic_error_body(status, message, code),
            status_code=status,
            media_type=MediaType.JSON,
            headers=headers,
        )
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


def handle_gateway_error(request: Request[Any, Any, Any], exc: GatewayError) -> Response[Any]:
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
        request=request,
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
    request: Request[Any, Any, Any], exc: ValidationException
) -> Response[Any]:
    details = exc.extra if isinstance(exc.extra, list) else []
    if not details:
        # Litestar raises this for bodies that are not JSON at all.
        return envelope(
            400,
            f"We could not parse the JSON body of your request. ({exc.detail})",
            request=request,
        )
    first = details[0] if isinstance(details[0], dict) else {}
    param = _param_from_key(first.get("key"))
    message = first.get("message", exc.detail)
    if param:
        message = f"Invalid value for '{param}': {message}"
    if len(details) > 1:
        message += f" (and {len(details) - 1} more problem(s))"
    return envelope(400, message, param=param, code="invalid_value", request=request)


def handle_http_exception(request: Request[Any, Any, Any], exc: HTTPException) -> Response[Any]:
    status = exc.status_code
    message = exc.detail or "error"
    if status == 413:
        message = f"Request body too large: {message}"
    if status >= 500:
        log.error("HTTP %s: %s", status, message)
    # Litestar's own headers (a 405's Allow) are kept.
    headers = {str(k): str(v) for k, v in (exc.headers or {}).items()} or None
    return envelope(
        status,
        message,
        error_type=_TYPES_BY_STATUS.get(status),
        headers=headers,
        request=request,
    )


def handle_too_deep(request: Request[Any, Any, Any], exc: RecursionError) -> Response[Any]:
    # The JSON decoder bounds its own recursion and raises this: the body nests too deeply.
    return envelope(
        400, "The JSON body is nested too deeply.", code="json_too_deep", request=request
    )


def handle_unexpected(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    log.exception("unexpected error", exc_info=exc)
    return envelope(500, "The server had an error while processing your request.", request=request)


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


ANTHROPIC_ERROR_RESPONSES: dict[int, ResponseSpec] = {
    status: ResponseSpec(
        AnthropicError,
        description=(spec.description or "").replace("OpenAI error envelope", "Anthropic's error"),
    )
    for status, spec in ERROR_RESPONSES.items()
}
