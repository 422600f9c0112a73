"""A tier of kind ``mlx-distributed`` as a backend: its settings become a cluster spec, a
supervisor that launches it now, and the upstream backend that talks to its rank 0."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from gateway.config import (
    ClusterHostSettings,
    ClusterSettings,
    ConfigError,
    Settings,
    TierSettings,
)
from gateway.engines.device import openblas_preload
from gateway.engines.distributed.backend import DistributedBackend, metrics_listener
from gateway.engines.distributed.launch import (
    ClusterHost,
    ClusterSpec,
    check_model_shards,
    local_hosts,
)
from gateway.engines.distributed.supervisor import ClusterSupervisor, RestartPolicy
from gateway.engines.upstream import OpenAIUpstreamBackend, UpstreamConfig
from gateway.metrics import GatewayMetrics
from gateway.scheduler.slot import Scheduler
from gateway.wiring.kit import resolve_model

MLX_LM_SERVER_MODEL = "default_model"  # the name mlx_lm.server gives its --model


def distributed_backend(
    name: str,
    tier: TierSettings,
    settings: Settings,
    metrics: GatewayMetrics,
    scheduler: Scheduler,
) -> DistributedBackend:
    """Build the tier's backend and launch its cluster (in the background)."""
    cluster = tier.cluster
    assert cluster is not None
    folder = resolve_model(settings, tier.model).folder
    try:
        hosts = local_hosts(_hosts(cluster))
        check_model_shards(folder, cluster.sharding, len(hosts))
    except (ValueError, OSError) as exc:
        raise ConfigError(f"tier {name!r}: {exc}") from exc
    spec = ClusterSpec(
        model_folder=folder,
        hosts=hosts,
        backend=cluster.backend,
        sharding=cluster.sharding,
        python=cluster.python or sys.executable,
        env={**openblas_preload(), **cluster.env},
        server_args=tuple(cluster.server_args),
        starting_port=cluster.starting_port,
    )
    policy = RestartPolicy(
        start_timeout=cluster.start_timeout_seconds,
        max_restarts=cluster.max_restarts,
        restart_window=cluster.restart_window_seconds,
        liveness_interval=cluster.liveness_interval_seconds,
        liveness_timeout=cluster.liveness_timeout_seconds,
        liveness_failures=cluster.liveness_failures,
    )
    supervisor = ClusterSupervisor(
        name,
        spec,
        settings.cache_dir / "clusters",
        policy,
        http_port=cluster.port,
        listener=metrics_listener(metrics.clusters, name),
    )
    # Rank 0 is this machine, so by default the cluster computes here and takes the slot.
    upstream = OpenAIUpstreamBackend(
        name,
        UpstreamConfig(
            base_url=supervisor.base_url,
            model=MLX_LM_SERVER_MODEL,
            same_machine=True if tier.same_machine is None else tier.same_machine,
            connect_timeout=tier.connect_timeout_seconds,
            read_timeout=tier.read_timeout_seconds,
            context_length=tier.context_length,
        ),
        metrics.upstream,
        scheduler,
    )
    backend = DistributedBackend(name, tier.model, supervisor, upstream, cluster.wait_ready_seconds)
    backend.start()
    return backend


def _hostfile_entries(path: Path) -> list[ClusterHostSettings]:
    """An mlx.launch hostfile's hosts: a JSON list, or an object with a ``hosts`` list.
    Anything else is a ValueError naming the file (the tier's start turns it into a
    ConfigError), never a KeyError from deep inside."""
    data = json.loads(path.read_text())
    listed = data.get("hosts") if isinstance(data, dict) else data
    if not isinstance(listed, list) or not listed:
        raise ValueError(f"{path}: not an mlx.launch hostfile (a JSON list of hosts)")
    return [ClusterHostSettings.model_validate(entry) for entry in listed]


def _hosts(cluster: ClusterSettings) -> list[ClusterHost]:
    entries: list[str | ClusterHostSettings] = list(cluster.hosts)
    if cluster.hostfile is not None:
        entries = list(_hostfile_entries(Path(cluster.hostfile)))
    hosts = []
    for entry in entries:
        if isinstance(entry, str):
            hosts.append(ClusterHost(entry, (entry,)))
        else:
            hosts.append(ClusterHost(entry.ssh, tuple(entry.ips), tuple(entry.rdma)))
    return hosts
