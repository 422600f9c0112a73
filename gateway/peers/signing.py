"""Signed peer requests and responses: HMAC-SHA256 with the shared peer secret.

Every request between peers carries ``X-Peer-Timestamp`` (Unix seconds), ``X-Peer-Nonce``
(random, used once) and ``X-Peer-Signature`` (hex). A request is refused when the signature
does not match (constant-time comparison), when its timestamp is outside the replay window,
or when its nonce was already seen within that window. The secret never travels, and neither
does a client's API key.

A ticket's answer is signed too (``ResponseSigner``): each Server-Sent Event carries, as its
``id``, an HMAC over the request's nonce, the event's position, its name and its data, so a
relay on the path can neither rewrite an event, drop or reorder one, nor replay the answer
to another request. A whole answer (``/v1/peer/hello``, a ticket answered without a stream)
carries ``X-Peer-Answer-Signature``: an HMAC over the request's nonce, the status and the
body (``sign_answer``); the asking node refuses an answer without it.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import secrets
import time
from collections.abc import Callable, Mapping

TIMESTAMP = "x-peer-timestamp"
NONCE = "x-peer-nonce"
SIGNATURE = "x-peer-signature"
TASKS_HASH = "x-peer-tasks-hash"  # signed too: the prompt definitions the sender expects
ANSWER_SIGNATURE = "x-peer-answer-signature"  # on a whole answer: its status and body


class PeerAuthError(Exception):
    """A peer request that is not accepted; ``reason`` labels the metric."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def _message(
    method: str, path: str, timestamp: str, nonce: str, tasks_hash: str, body: bytes
) -> bytes:
    head = "\n".join([method.upper(), path, timestamp, nonce, tasks_hash]).encode()
    return head + b"\n" + hashlib.sha256(body).hexdigest().encode()


def sign(
    secret: str, method: str, path: str, body: bytes, tasks_hash: str, now: float | None = None
) -> dict[str, str]:
    """The headers that sign one request."""
    timestamp = str(int(time.time() if now is None else now))
    nonce = secrets.token_hex(16)
    digest = hmac.new(
        secret.encode(), _message(method, path, timestamp, nonce, tasks_hash, body), hashlib.sha256
    ).hexdigest()
    return {TIMESTAMP: timestamp, NONCE: nonce, SIGNATURE: digest, TASKS_HASH: tasks_hash}


class RequestVerifier:
    """Checks signed requests; remembers nonces for the replay window."""

    def __init__(
        self, secret: str, window_seconds: float, clock: Callable[[], float] = time.time
    ) -> None:
        self.secret = secret.encode()
        self.window = window_seconds
        self.clock = clock
        self._seen: dict[str, float] = {}  # nonce -> when it may be forgotten

    def verify(self, method: str, path: str, headers: Mapping[str, str], body: bytes) -> None:
        timestamp, nonce = headers.get(TIMESTAMP), headers.get(NONCE)
        signature, tasks_hash = headers.get(SIGNATURE), headers.get(TASKS_HASH, "")
        if not timestamp or not nonce or not signature:
            raise PeerAuthError("unsigned", "the request is not signed")
        expected = hmac.new(
            self.secret, _message(method, path, timestamp, nonce, tasks_hash, body), hashlib.sha256
        ).hexdigest()
        if not _same(expected, signature):
            raise PeerAuthError("signature", "the request's signature does not match")
        now = self.clock()
        try:
            stamp = float(timestamp)
        except ValueError:
            raise PeerAuthError("timestamp", "the request's timestamp is not a number") from None
        if not math.isfinite(stamp):  # "nan" compares false with any window: never accepted
            raise PeerAuthError("timestamp", "the request's timestamp is not a finite number")
        age = abs(now - stamp)
        if age > self.window:
            raise PeerAuthError(
                "timestamp",
                f"the request's timestamp is {age:.0f} s off (window {self.window:.0f} s)",
            )
        self._forget(now)
        if nonce in self._seen:
            raise PeerAuthError("replay", "the request was already received (replayed nonce)")
        self._seen[nonce] = now + 2 * self.window

    def _forget(self, now: float) -> None:
        if len(self._seen) > 1024 or any(t < now for t in list(self._seen.values())[:8]):
            self._seen = {n: t for n, t in self._seen.items() if t >= now}


def _same(expected: str, given: str) -> bool:
    """Constant-time comparison that also takes non-ASCII text (a 401, never a TypeError)."""
    return hmac.compare_digest(expected.encode(), given.encode("utf-8", "surrogateescape"))


def sign_answer(secret: str, nonce: str, status: int, body: bytes) -> str:
    """The signature of a whole answer (status and body) to the request that sent ``nonce``."""
    message = "\n".join([nonce, "answer", str(status), hashlib.sha256(body).hexdigest()])
    return hmac.new(secret.encode(), message.encode(), hashlib.sha256).hexdigest()


def answer_is_signed(
    secret: str, nonce: str, status: int, body: bytes, signature: str | None
) -> bool:
    """Whether a whole answer is the one the peer signed for our request (``nonce``)."""
    return signature is not None and _same(sign_answer(secret, nonce, status, body), signature)


class ResponseSigner:
    """Signs (on the answering peer) or checks (on the asking node) a ticket's events in order.

    Both sides build one per request, from the request's nonce; the ``n``-th event's
    signature covers ``n``, so each instance must see the events in the order they were sent.
    """

    def __init__(self, secret: str, nonce: str) -> None:
        self._key = secret.encode()
        self._nonce = nonce
        self._position = 0

    def sign(self, event: str, data: str) -> str:
        message = "\n".join([self._nonce, str(self._position), event, data]).encode()
        self._position += 1
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()

    def check(self, event: str, data: str, signature: str | None) -> bool:
        expected = self.sign(event, data)
        return signature is not None and _same(expected, signature)
