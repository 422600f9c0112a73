"""Every request counted by route and status (``gateway_requests_total``)."""

from __future__ import annotations

from litestar.exceptions import HTTPException
from litestar.middleware import ASGIMiddleware
from litestar.types import ASGIApp, Message, Receive, ReceiveMessage, Scope, Send

from gateway.errors import GatewayError
from gateway.metrics import RequestMetrics

# Gone before any answer: nginx's code, not a server error.
CLIENT_CLOSED_REQUEST = 499


class RequestMetricsMiddleware(ASGIMiddleware):
    """Counts each request once, with the status it was answered with. The outermost of the
    gateway's middlewares: a request that a later one refuses (draining, the API key, the
    body guard) is counted with the status of the error it raised, which Litestar's exception
    handler around this stack then turns into the answer."""

    def __init__(self, metrics: RequestMetrics) -> None:
        self.metrics = metrics

    async def handle(self, scope: Scope, receive: Receive, send: Send, next_app: ASGIApp) -> None:
        status = 500
        answered = False

        async def send_and_note(message: Message) -> None:
            nonlocal status, answered
            if message["type"] == "http.response.start":
                status, answered = message["status"], True
            await send(message)

        async def receive_and_note() -> ReceiveMessage:
            nonlocal status
            message = await receive()
            if message["type"] == "http.disconnect" and not answered:
                status = CLIENT_CLOSED_REQUEST
            return message

        try:
            await next_app(scope, receive_and_note, send_and_note)
        except (GatewayError, HTTPException) as exc:
            if not answered and status != CLIENT_CLOSED_REQUEST:
                status = exc.status_code
            raise
        finally:
            # Unmatched paths share one label: a scan of random paths must not grow /metrics.
            route = scope.get("path_template") or "unmatched"
            self.metrics.requests.labels(route, str(status)).inc()
