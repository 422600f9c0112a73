"""The cluster's description and the ``mlx.launch`` command line that starts it.

``mlx.launch`` runs a host's rank locally (no ssh) only when its ``ssh`` name is exactly
``127.0.0.1``; every other host is reached over ssh, and the ring/JACCL backends connect the
ranks over each host's ``ips``. Rank 0 serves HTTP on 127.0.0.1, so it must be this machine:
the gateway talks to it over loopback and nothing unauthenticated listens on the LAN.
"""

from __future__ import annotations

import json
import socket
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

Sharding = Literal["pipeline", "tensor"]
LOCAL_SSH = "127.0.0.1"  # mlx.launch's own marker for "run here, without ssh"
# Ranks must never fetch weights: a missing file is an error, not a download.
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


@dataclass(frozen=True)
class ClusterHost:
    """One rank's machine: the name ssh reaches it by and the addresses the ranks use."""

    ssh: str
    ips: tuple[str, ...] = ()
    rdma: tuple[str | None, ...] = ()  # JACCL: the RDMA device towards each rank (null: self)

    def as_json(self) -> dict[str, object]:
        entry: dict[str, object] = {"ssh": self.ssh, "ips": list(self.ips)}
        if self.rdma:
            # TOML has no null: "" stands for a rank's own entry.
            entry["rdma"] = [device or None for device in self.rdma]
        return entry


@dataclass(frozen=True)
class ClusterSpec:
    """Everything needed to start one sharded ``mlx_lm.server``."""

    model_folder: Path  # the same path on every host
    hosts: tuple[ClusterHost, ...]
    backend: str = "ring"  # ring | jaccl | jaccl-ring | mpi
    sharding: Sharding = "pipeline"
    python: str = sys.executable  # the interpreter on every host (same venv path)
    launcher: tuple[str, ...] = field(default_factory=lambda: default_launcher())
    env: Mapping[str, str] = field(default_factory=dict)  # for every rank
    server_args: tuple[str, ...] = ()  # more mlx_lm.server flags
    starting_port: int | None = None  # ring/JACCL ports; None: free ones here, each start

    @property
    def ranks(self) -> int:
        return len(self.hosts)


def default_launcher() -> tuple[str, ...]:
    """``mlx.launch`` of this interpreter's environment (its module has no ``__main__``)."""
    script = Path(sys.executable).with_name("mlx.launch")
    if script.is_file():
        return (str(script),)
    return (sys.executable, "-c", "from mlx._distributed_utils.launch import main; main()")


def is_this_machine(name: str) -> bool:
    """127.x, localhost, or this host's name with or without ``.local`` (Bonjour's form, as
    ``mlx.distributed_config`` writes hostfiles)."""
    if name == "localhost" or name.startswith("127."):
        return True
    return _bare(name) == _bare(socket.gethostname())


def _bare(host: str) -> str:
    return host.lower().removesuffix(".local")


def local_hosts(hosts: Sequence[ClusterHost]) -> tuple[ClusterHost, ...]:
    """Rank 0 must run here: its ssh name becomes mlx.launch's local marker."""
    if not hosts:
        raise ValueError("a distributed tier needs at least one host")
    first = hosts[0]
    if not is_this_machine(first.ssh):
        raise ValueError(
            f"rank 0 ({first.ssh}) must be this machine: it serves HTTP on 127.0.0.1 for the "
            "gateway; list this Mac first (ssh = '127.0.0.1', ips = its Thunderbolt/LAN address)"
        )
    rank0 = ClusterHost(LOCAL_SSH, first.ips or (LOCAL_SSH,), first.rdma)
    rest = tuple(
        ClusterHost(LOCAL_SSH, h.ips or (LOCAL_SSH,), h.rdma)
        if h.ssh in (LOCAL_SSH, "localhost")
        else h
        for h in hosts[1:]
    )
    return (rank0, *rest)


def hostfile_json(spec: ClusterSpec) -> str:
    return json.dumps({"backend": spec.backend, "hosts": [h.as_json() for h in spec.hosts]})


def free_ports(count: int, attempts: int = 20) -> int:
    """The first of ``count`` consecutive ports free on 127.0.0.1 (the ring's listeners)."""
    for _ in range(attempts):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            first = int(probe.getsockname()[1])
        if first + count > 65535:
            continue
        try:
            for port in range(first, first + count):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
        except OSError:
            continue
        return first
    raise OSError(f"no {count} consecutive free ports found")


def launch_command(spec: ClusterSpec, hostfile: Path, http_port: int, ring_port: int) -> list[str]:
    """``mlx.launch ... -- python -m mlx_lm server`` for this cluster; one host is a plain
    ``mlx_lm server`` (mlx.launch gives a lone ring rank an empty hostfile it cannot parse)."""
    env = {**OFFLINE_ENV, **spec.env}
    server = [
        "-m",
        "mlx_lm",
        "server",
        "--model",
        str(spec.model_folder),
        "--host",
        "127.0.0.1",
        "--port",
        str(http_port),
        *(["--pipeline"] if spec.sharding == "pipeline" and spec.ranks > 1 else []),
        *spec.server_args,
    ]
    if spec.ranks == 1:
        return [spec.python, *server]
    return [
        *spec.launcher,
        "--backend",
        spec.backend,
        "--hostfile",
        str(hostfile),
        "--starting-port",
        str(ring_port),
        "--python",
        spec.python,
        *(arg for key, value in env.items() for arg in ("--env", f"{key}={value}")),
        "--",
        *server,
    ]


def check_model_shards(folder: Path, sharding: Sharding, ranks: int) -> None:
    """What mlx-lm would refuse only after every rank started: said at once, with the fix.

    Pipeline sharding reads ``model.safetensors.index.json`` to give each rank its layers;
    tensor sharding splits every attention head group, so the heads must divide by the ranks.
    """
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise ValueError(f"{folder} is not an mlx-lm model folder (no config.json)")
    if ranks < 2:
        return
    if sharding == "pipeline" and not (folder / "model.safetensors.index.json").is_file():
        raise ValueError(
            f"pipeline sharding needs {folder}/model.safetensors.index.json "
            "(mlx_lm.convert writes it); or use sharding = 'tensor'"
        )
    if sharding == "tensor":
        config = json.loads(config_path.read_text())
        config = config.get("text_config", config)
        for key in ("num_attention_heads", "num_key_value_heads"):
            heads = config.get(key)
            if isinstance(heads, int) and heads % ranks:
                raise ValueError(
                    f"tensor sharding over {ranks} ranks needs {key} ({heads}) divisible by "
                    f"{ranks}; use sharding = 'pipeline' or another number of hosts"
                )
