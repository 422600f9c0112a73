"""Peers found on the LAN: this node advertises itself and browses for others with mDNS/DNS-SD
(python-zeroconf, service type ``_onemac-gateway._tcp.local.``).

Discovery only says *where* a peer is and what it claims (``adverts``); ``Peers.offer`` decides
whether to use it, and every request to it is still signed with the shared secret, so a
stranger that advertises itself gets no ticket it could answer and cannot send one. A gateway
listening on 127.0.0.1 only is never advertised to the LAN: loopback discovery (one machine,
a test) happens only when ``peers.discover_interfaces`` lists loopback addresses.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import re
import socket
from typing import Any

import ifaddr
from zeroconf import IPVersion, ServiceStateChange, Zeroconf
from zeroconf.asyncio import AsyncServiceBrowser, AsyncServiceInfo, AsyncZeroconf

from gateway.config import Settings
from gateway.peers.adverts import SERVICE_TYPE, read_advert, txt_record
from gateway.peers.nodes import Peers
from gateway.protocol.peer import PROTOCOL_VERSION

log = logging.getLogger(__name__)
WILDCARD_HOSTS = frozenset({"0.0.0.0", "", "::"})
RESOLVE_MILLISECONDS = 3000


def advertised_addresses(settings: Settings) -> list[str]:
    """The IPv4 addresses this node is reachable at and advertises (and browses on)."""
    listed = settings.peers.discover_interfaces
    if listed:
        return list(listed)
    if settings.host in WILDCARD_HOSTS:
        return [
            str(ip.ip)
            for adapter in ifaddr.get_adapters()
            for ip in adapter.ips
            if ip.is_IPv4 and not ipaddress.ip_address(str(ip.ip)).is_loopback
        ]
    try:
        return [str(ipaddress.IPv4Address(settings.host))]
    except ValueError:
        return [socket.gethostbyname(settings.host)]


class Discovery:
    """Advertises this node and feeds the adverts of others to ``peers``."""

    def __init__(self, peers: Peers, settings: Settings, node_id: str, tasks_hash: str) -> None:
        self.peers = peers
        self.settings = settings
        self.node_id = node_id
        self.tasks_hash = tasks_hash
        self.addresses = advertised_addresses(settings)
        self.loopback = all(ipaddress.ip_address(a).is_loopback for a in self.addresses)
        self._zeroconf: AsyncZeroconf | None = None
        self._browser: AsyncServiceBrowser | None = None
        self._own_name: str | None = None
        self._resolving: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        if not self.addresses:
            raise RuntimeError("peers.discover: this machine has no LAN IPv4 address to advertise")
        self._zeroconf = AsyncZeroconf(interfaces=self.addresses, ip_version=IPVersion.V4Only)
        info = self._service_info()
        # Probing makes the name unique on the LAN; a taken one becomes "name (2)" and so on.
        await (await self._zeroconf.async_register_service(info, allow_name_change=True))
        self._own_name = info.name
        self.peers.advertised = {
            "name": info.name,
            "node": self.node_id,
            "addresses": self.addresses,
            "port": self.settings.port,
            "ttl_seconds": self.settings.peers.discover_ttl_seconds,
        }
        log.info("advertising %s on %s", info.name, ", ".join(self.addresses))
        self._browser = AsyncServiceBrowser(
            self._zeroconf.zeroconf, SERVICE_TYPE, handlers=[self._on_change]
        )

    async def stop(self) -> None:
        """Stop browsing and say goodbye (peers drop this node at once)."""
        if self._browser is not None:
            await self._browser.async_cancel()
        for task in list(self._resolving):
            task.cancel()
        if self._zeroconf is not None:
            await self._zeroconf.async_unregister_all_services()
            await self._zeroconf.async_close()

    def _service_info(self) -> AsyncServiceInfo:
        ttl = max(1, round(self.settings.peers.discover_ttl_seconds))
        instance = re.sub(r"[.\x00-\x1f]", "-", self.node_id).encode()[:63].decode(errors="ignore")
        host = re.sub(r"[^a-z0-9-]+", "-", self.node_id.lower()).strip("-")[:50] or "gateway"
        return AsyncServiceInfo(
            SERVICE_TYPE,
            f"{instance}.{SERVICE_TYPE}",
            addresses=[socket.inet_aton(a) for a in self.addresses],
            port=self.settings.port,
            properties=txt_record(
                self.node_id, self.settings.port, self.tasks_hash, PROTOCOL_VERSION, ttl
            ),
            server=f"onemac-{host}.local.",
            host_ttl=ttl,
            other_ttl=ttl,
        )

    def _on_change(
        self, zeroconf: Zeroconf, service_type: str, name: str, state_change: ServiceStateChange
    ) -> None:
        if name == self._own_name:
            return
        if state_change is ServiceStateChange.Removed:
            log.info("peer advert %s withdrawn", name)
            self.peers.withdraw(name)
            return
        task = asyncio.create_task(self._resolve(name))
        self._resolving.add(task)
        task.add_done_callback(self._resolving.discard)

    async def _resolve(self, name: str) -> None:
        assert self._zeroconf is not None
        info = AsyncServiceInfo(SERVICE_TYPE, name)
        if not await info.async_request(self._zeroconf.zeroconf, RESOLVE_MILLISECONDS):
            log.info("peer advert %s did not resolve", name)
            return
        properties: dict[bytes, Any] = dict(info.properties)
        advert = read_advert(
            name,
            info.parsed_addresses(IPVersion.V4Only),
            info.port,
            properties,
            loopback=self.loopback,
        )
        if advert is None:
            log.warning("ignored advert %s: not a gateway advert we can use (%s)", name, properties)
            return
        self.peers.offer(advert)


async def start_discovery(
    settings: Settings, peers: Peers | None, node_id: str, tasks_hash: str
) -> Discovery | None:
    """Advertise and browse when ``peers.discover`` is set (``app``'s lifespan stops it)."""
    if peers is None or not settings.peers.discover:
        return None
    discovery = Discovery(peers, settings, node_id, tasks_hash)
    await discovery.start()
    return discovery
