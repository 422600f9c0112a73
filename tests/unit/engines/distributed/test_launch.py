"""The cluster's command line, its hosts rule and the shard checks made before any launch."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from gateway.config import ConfigError, load_settings
from gateway.engines.distributed.launch import (
    ClusterHost,
    ClusterSpec,
    check_model_shards,
    hostfile_json,
    launch_command,
    local_hosts,
)


def spec(**changes: object) -> ClusterSpec:
    base: dict[str, object] = {
        "model_folder": Path("/models/big"),
        "hosts": (ClusterHost("127.0.0.1", ("10.0.0.1",)), ClusterHost("mac2", ("10.0.0.2",))),
        "python": "/venv/bin/python",
        "launcher": ("/venv/bin/mlx.launch",),
    }
    return ClusterSpec(**(base | changes))  # type: ignore[arg-type]


def test_the_command_runs_mlx_lm_server_on_loopback_offline() -> None:
    command = launch_command(spec(env={"A": "1"}), Path("/tmp/h.json"), 8100, 40000)
    assert command == [
        "/venv/bin/mlx.launch",
        "--backend", "ring",
        "--hostfile", "/tmp/h.json",
        "--starting-port", "40000",
        "--python", "/venv/bin/python",
        "--env", "HF_HUB_OFFLINE=1",
        "--env", "TRANSFORMERS_OFFLINE=1",
        "--env", "A=1",
        "--",
        "-m", "mlx_lm", "server",
        "--model", "/models/big",
        "--host", "127.0.0.1",
        "--port", "8100",
        "--pipeline",
    ]  # fmt: skip


def test_tensor_sharding_is_mlx_lm_servers_default_and_extra_flags_follow() -> None:
    command = launch_command(
        spec(sharding="tensor", server_args=("--prompt-cache-size", "2")), Path("h"), 1, 2
    )
    assert "--pipeline" not in command
    assert command[-2:] == ["--prompt-cache-size", "2"]


def test_one_host_is_a_plain_mlx_lm_server() -> None:
    one = spec(hosts=(ClusterHost("127.0.0.1"),), env={"A": "1"})
    command = launch_command(one, Path("h"), 8100, 1)
    assert command[:4] == ["/venv/bin/python", "-m", "mlx_lm", "server"]
    assert "--pipeline" not in command


def test_the_hostfile_is_mlx_launchs_format() -> None:
    hosts = (ClusterHost("127.0.0.1", ("10.0.0.1",), ("", "rdma_en3")),)
    assert json.loads(hostfile_json(spec(hosts=hosts, backend="jaccl"))) == {
        "backend": "jaccl",
        "hosts": [{"ssh": "127.0.0.1", "ips": ["10.0.0.1"], "rdma": [None, "rdma_en3"]}],
    }


def test_rank_0_must_be_this_machine_and_runs_without_ssh() -> None:
    hosts = local_hosts([ClusterHost("localhost"), ClusterHost("mac2", ("10.0.0.2",))])
    assert hosts == (ClusterHost("127.0.0.1", ("127.0.0.1",)), ClusterHost("mac2", ("10.0.0.2",)))
    bonjour = f"{socket.gethostname().removesuffix('.local').upper()}.local"
    assert local_hosts([ClusterHost(bonjour, ("10.0.0.1",))])[0].ssh == "127.0.0.1"
    with pytest.raises(ValueError, match=r"rank 0 .*must be this machine"):
        local_hosts([ClusterHost("mac2", ("10.0.0.2",)), ClusterHost("127.0.0.1")])


def write_model(folder: Path, index: bool, **config: int) -> Path:
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    if index:
        (folder / "model.safetensors.index.json").write_text("{}")
    return folder


def test_pipeline_needs_the_weight_index(tmp_path: Path) -> None:
    folder = write_model(tmp_path / "m", index=False)
    with pytest.raises(ValueError, match=r"model\.safetensors\.index\.json"):
        check_model_shards(folder, "pipeline", 2)
    check_model_shards(folder, "pipeline", 1)  # one rank: nothing to split


def test_tensor_needs_heads_that_divide_by_the_ranks(tmp_path: Path) -> None:
    smollm2 = write_model(tmp_path / "s", index=True, num_attention_heads=9, num_key_value_heads=3)
    with pytest.raises(ValueError, match=r"num_attention_heads \(9\) divisible by 2"):
        check_model_shards(smollm2, "tensor", 2)
    check_model_shards(smollm2, "tensor", 3)
    check_model_shards(smollm2, "pipeline", 2)


def test_config_a_cluster_goes_with_its_kind(tmp_path: Path) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(
        '[tiers.big]\nkind = "mlx-distributed"\nmodel = "./m"\n'
        '[tiers.big.cluster]\nhostfile = "hosts.json"\nsharding = "tensor"\n'
    )
    tier = load_settings(config, environ={}).tiers["big"]
    assert tier.model == str(tmp_path / "m")
    assert tier.cluster is not None and tier.cluster.hostfile == tmp_path / "hosts.json"
    config.write_text('[tiers.big]\nkind = "mlx-distributed"\nmodel = "m"\n')
    with pytest.raises(ConfigError, match="cluster"):
        load_settings(config, environ={})
    config.write_text(
        '[tiers.big]\nkind = "mlx-distributed"\nmodel = "m"\n[tiers.big.cluster]\nbackend = "ring"\n'
    )
    with pytest.raises(ConfigError, match="hosts or hostfile"):
        load_settings(config, environ={})


@pytest.mark.parametrize(
    "text",
    ['{"host": []}', '"ring"', "[]", '[{"ssh": 1}]', "{not json", '{"hosts": {"ssh": "a"}}'],
)
def test_a_damaged_hostfile_is_a_clear_error(tmp_path: Path, text: str) -> None:
    from gateway.wiring.clusters import _hostfile_entries

    hostfile = tmp_path / "hosts.json"
    hostfile.write_text(text)
    with pytest.raises(ValueError):  # the tier's start makes it a ConfigError naming the tier
        _hostfile_entries(hostfile)


def test_a_hostfile_as_mlx_writes_it_is_read(tmp_path: Path) -> None:
    from gateway.wiring.clusters import _hostfile_entries

    hostfile = tmp_path / "hosts.json"
    hostfile.write_text('{"backend": "ring", "hosts": [{"ssh": "a", "ips": ["10.0.0.1"]}]}')
    (entry,) = _hostfile_entries(hostfile)
    assert entry.ssh == "a" and entry.ips == ["10.0.0.1"]
    hostfile.write_text('[{"ssh": "b", "ips": []}]')
    assert [e.ssh for e in _hostfile_entries(hostfile)] == ["b"]
