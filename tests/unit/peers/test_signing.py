"""Signed peer requests: what is accepted and each reason a request is refused."""

from __future__ import annotations

import pytest

from gateway.peers.signing import PeerAuthError, RequestVerifier, sign

SECRET = "s" * 32


def refusal(verifier: RequestVerifier, headers: dict[str, str], body: bytes = b"{}") -> str:
    with pytest.raises(PeerAuthError) as refused:
        verifier.verify("POST", "/v1/peer/tickets", headers, body)
    return refused.value.reason


def test_a_signed_request_is_accepted_once() -> None:
    now = 1_000_000.0
    verifier = RequestVerifier(SECRET, 30, clock=lambda: now)
    headers = sign(SECRET, "POST", "/v1/peer/tickets", b"{}", "hash", now=now)
    verifier.verify("POST", "/v1/peer/tickets", headers, b"{}")
    assert refusal(verifier, headers) == "replay"


def test_each_tampering_is_refused() -> None:
    now = 1_000_000.0
    verifier = RequestVerifier(SECRET, 30, clock=lambda: now)

    def fresh(**change: object) -> dict[str, str]:
        return sign(SECRET, "POST", "/v1/peer/tickets", b"{}", "hash", now=now) | change  # type: ignore[operator]

    assert refusal(verifier, {}) == "unsigned"
    assert refusal(verifier, fresh(), body=b'{"x": 1}') == "signature"  # another body
    assert refusal(verifier, fresh(**{"x-peer-tasks-hash": "other"})) == "signature"
    assert (
        refusal(verifier, sign("w" * 32, "POST", "/v1/peer/tickets", b"{}", "hash", now=now))
        == "signature"
    )
    with pytest.raises(PeerAuthError) as other_path:
        verifier.verify("POST", "/v1/peer/hello", fresh(), b"{}")
    assert other_path.value.reason == "signature"
    old = sign(SECRET, "POST", "/v1/peer/tickets", b"{}", "hash", now=now - 31)
    assert refusal(verifier, old) == "timestamp"
    future = sign(SECRET, "POST", "/v1/peer/tickets", b"{}", "hash", now=now + 31)
    assert refusal(verifier, future) == "timestamp"
