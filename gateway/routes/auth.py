"""The API key: when ``api_key`` is set, every request but the public ones must carry it.

Public: ``/health``, the playground (``/`` and ``/playground/...``: the page asks for the key
itself) and, when peers are set up, ``/v1/peer/...`` (signed with the peer secret instead; a
peer never has the key). Every method needs the key, OPTIONS and HEAD included.
"""

from __future__ import annotations

import hmac
import re
from typing import Any

from litestar.connection import ASGIConnection
from litestar.middleware import AbstractAuthenticationMiddleware, AuthenticationResult
from litestar.middleware.base import DefineMiddleware
from litestar.types import ASGIApp

from gateway.errors import AuthenticationError

PUBLIC_PATHS = ("/health", "/")
PUBLIC_PREFIXES = ("/playground/",)
PEER_PREFIX = "/v1/peer/"


class ApiKeyAuthentication(AbstractAuthenticationMiddleware):
    """``Authorization: Bearer <key>`` (the scheme in any case, RFC 7235) or, as Anthropic's
    clients send it, ``x-api-key: <key>``; compared in constant time. A wrong or missing key
    is a 401 ``invalid_api_key`` (with ``WWW-Authenticate``, from the error handler)."""

    def __init__(self, app: ASGIApp, api_key: str, public: list[str]) -> None:
        # Every method needs the key: Litestar's default would let OPTIONS through.
        super().__init__(app, exclude=public, exclude_http_methods=[])
        self.expected = api_key.encode()

    async def authenticate_request(
        self, connection: ASGIConnection[Any, Any, Any, Any]
    ) -> AuthenticationResult:
        if not self._authorized(dict(connection.scope["headers"])):
            raise AuthenticationError("Incorrect or missing API key (Authorization: Bearer ...).")
        return AuthenticationResult(user="api-key", auth=None)

    def _authorized(self, headers: dict[bytes, bytes]) -> bool:
        scheme, _, token = headers.get(b"authorization", b"").strip().partition(b" ")
        if scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), self.expected):
            return True
        return hmac.compare_digest(headers.get(b"x-api-key", b""), self.expected)


def api_key_middleware(api_key: str, peers_signed: bool) -> DefineMiddleware:
    """The key check, with the public paths left out (anchored: ``exclude`` patterns are
    searched, not matched)."""
    prefixes = PUBLIC_PREFIXES + ((PEER_PREFIX,) if peers_signed else ())
    public = [rf"^{re.escape(path)}\Z" for path in PUBLIC_PATHS]
    public += [f"^{re.escape(prefix)}" for prefix in prefixes]
    return DefineMiddleware(ApiKeyAuthentication, api_key=api_key, public=public)
