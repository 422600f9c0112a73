"""What a node says about itself on the LAN (mDNS TXT record), and reading it back.

The record carries what another node needs to decide whether to use it before asking it
anything: its name, its port, its task definitions (``tasks_hash``), the peer protocol version
(``api``) and how long to trust the advertisement (``ttl``). Never the shared secret: a
discovered peer is still trusted only through signed requests (``signing``).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

SERVICE_TYPE = "_onemac-gateway._tcp.local."
TXT_KEYS = ("node", "port", "tasks_hash", "api", "ttl")


@dataclass(frozen=True)
class Advert:
    """One advertised gateway, as read from its mDNS records."""

    name: str  # the service instance name, unique on the LAN (mDNS probes it)
    node: str  # the node's own name (its ``node_id``)
    url: str
    tasks_hash: str
    api: int
    ttl_seconds: float


def txt_record(
    node: str, port: int, tasks_hash: str, api: int, ttl_seconds: float
) -> dict[str, str]:
    """This node's TXT record (each value well under the 255-byte limit of a TXT string)."""
    return {
        "node": node[:200],
        "port": str(port),
        "tasks_hash": tasks_hash,
        "api": str(api),
        "ttl": f"{ttl_seconds:g}",
    }


def read_advert(
    name: str,
    addresses: Sequence[str],
    port: int | None,
    properties: Mapping[bytes, bytes | None],
    *,
    loopback: bool,
) -> Advert | None:
    """The advert of a resolved service, or None when it is not a usable gateway advert
    (no IPv4 address we may use, missing or malformed fields)."""
    text = {
        k.decode("utf-8", "replace"): (v or b"").decode("utf-8", "replace")
        for k, v in properties.items()
    }
    address = _usable_address(addresses, loopback)
    if address is None or not port or not text.get("tasks_hash") or not text.get("node"):
        return None
    try:
        api, ttl = int(text.get("api", "")), float(text.get("ttl", ""))
    except ValueError:
        return None
    if not 0 < ttl < 1e6:
        return None
    return Advert(name, text["node"], f"http://{address}:{port}", text["tasks_hash"], api, ttl)


def _usable_address(addresses: Sequence[str], loopback: bool) -> str | None:
    """The first IPv4 address another node can reach: loopback ones only when discovery
    itself runs on loopback (one machine, a test); a LAN node never calls 127.0.0.1."""
    for text in addresses:
        try:
            address = ipaddress.ip_address(text)
        except ValueError:
            continue
        if address.version == 4 and address.is_loopback == loopback:
            return text
    return None
