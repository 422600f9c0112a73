"""The gateway's one error hierarchy; ``gateway.routes.errors`` turns it into OpenAI's envelope.

::

    GatewayError                      500 server_error (never raised for bad input)
    ├── InvalidRequestError           400 invalid_request_error (param names the field)
    │   └── ContextLengthExceededError 400 code=context_length_exceeded
    ├── AuthenticationError           401 code=invalid_api_key
    ├── ModelNotFoundError            404 code=model_not_found (also: a tier's model not on disk)
    ├── NotFoundError                 404 (an unknown typing hint, ...)
    ├── RequestTimeoutError           408 the request's body did not arrive in time
    ├── ConflictError                 409 (a peer built from other task definitions)
    ├── RequestTooLargeError          413
    ├── UnprocessableError            422 (a task's arguments: missing, unknown, too long)
    ├── QueueFullError                429 + Retry-After
    ├── ServiceUnavailableError       503 (queue wait limit, memory budget)
    │   └── ShuttingDownError         503 + Retry-After: the server is stopping
    ├── UpstreamError                 502 an upstream server failed or answered badly
    │   └── UpstreamTimeoutError      504 it did not answer in time
    ├── UpstreamRejectedError         the upstream's own 4xx, passed through
    └── ModelImportError              a model could not be imported (start-up, CLI)
"""

from __future__ import annotations


class GatewayError(Exception):
    """Base of every error the gateway raises on purpose."""

    status_code = 500
    error_type = "server_error"
    code: str | None = None

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code


class InvalidRequestError(GatewayError):
    status_code = 400
    error_type = "invalid_request_error"


class ContextLengthExceededError(InvalidRequestError):
    code = "context_length_exceeded"


class ModelNotFoundError(GatewayError):
    status_code = 404
    error_type = "invalid_request_error"
    code = "model_not_found"


class NotFoundError(GatewayError):
    status_code = 404
    error_type = "invalid_request_error"
    code = "not_found"


class RequestTimeoutError(GatewayError):
    status_code = 408
    error_type = "invalid_request_error"
    code = "request_timeout"


class RequestTooLargeError(GatewayError):
    status_code = 413
    error_type = "invalid_request_error"
    code = "request_too_large"


class ConflictError(GatewayError):
    status_code = 409
    error_type = "invalid_request_error"
    code = "conflict"


class UnprocessableError(GatewayError):
    status_code = 422
    error_type = "invalid_request_error"
    code = "invalid_argument"


class QueueFullError(GatewayError):
    status_code = 429
    error_type = "rate_limit_error"
    code = "queue_full"

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ServiceUnavailableError(GatewayError):
    status_code = 503
    error_type = "server_error"
    code = "service_unavailable"


class ShuttingDownError(ServiceUnavailableError):
    code = "shutting_down"

    def __init__(self, message: str = "The server is shutting down; retry shortly.") -> None:
        super().__init__(message)
        self.retry_after = 5


class UpstreamError(GatewayError):
    status_code = 502
    error_type = "upstream_error"
    code = "bad_gateway"


class UpstreamTimeoutError(UpstreamError):
    status_code = 504
    code = "upstream_timeout"


class UpstreamRejectedError(GatewayError):
    """The upstream refused the request (its 4xx): the client's problem, passed through."""

    def __init__(
        self,
        message: str,
        *,
        status_code: int,
        error_type: str | None = None,
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message, param=param, code=code)
        self.status_code = status_code
        self.error_type = error_type or "invalid_request_error"


class ModelImportError(GatewayError):
    error_type = "server_error"
    code = "model_import_failed"


class AuthenticationError(GatewayError):
    status_code = 401
    error_type = "invalid_request_error"
    code = "invalid_api_key"
