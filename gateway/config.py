"""The gateway's configuration: one typed object, loaded once from file, environment and flags.

Precedence, lowest first: defaults, the TOML file (``--config`` or ``GATEWAY_CONFIG``),
environment variables (``GATEWAY_HOST``, ``GATEWAY_PORT``, ``GATEWAY_CACHE_DIR``,
``GATEWAY_API_KEY``), command-line flags.
"""

from __future__ import annotations

import ipaddress
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gateway.modelref import DEFAULT_MODEL_ID, is_relative_path, parse_model_ref

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
IMPLICIT_TIER = "default"


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "onemac-gateway"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SchedulerSettings(_Section):
    max_queued_user: int = Field(64, ge=1, description="Waiting user jobs before 429.")
    max_queued_task: int = Field(64, ge=1, description="Waiting task jobs before 429.")
    max_queued_background: int = Field(256, ge=1, description="Waiting background jobs before 429.")
    max_queued_hints: int = Field(
        8,
        ge=1,
        description="Typing-hint prefills waiting in their lane; beyond it the oldest is dropped.",
    )
    max_queue_wait_seconds: float = Field(300.0, gt=0, description="A job waiting longer gets 503.")
    ageing_seconds: float = Field(
        60.0, gt=0, description="A background job waiting this long competes as a task job."
    )
    pipeline_grace_seconds: float = Field(
        0.5, ge=0, description="The pipeline lock stays closed this long after a user job."
    )
    max_paused_with_cache: int = Field(
        4,
        ge=0,
        description="Preempted jobs that keep their KV cache; the rest recompute on resume.",
    )
    typing_quiet_seconds: float = Field(
        2.0, ge=0, description="Background work waits until typing has paused this long."
    )
    prefill_freeze_max_seconds: float = Field(
        5.0,
        ge=0,
        description="The prefill freeze holds task and background work at most this long after "
        "a typing hint's last update (an abandoned hint must not starve them).",
    )
    token_flush_seconds: float = Field(
        0.005,
        ge=0,
        le=0.1,
        description="A streamed token made within this time of the last one handed to the "
        "event loop may wait for the next token, to go out with it (a GPU's pace; each waits "
        "at most one decode step); 0: every token at once.",
    )


class PeerSettings(_Section):
    """Other gateways on the LAN that take tickets (``gateway.peers``)."""

    secret: str | None = Field(
        None,
        min_length=16,
        description="Shared secret that signs every peer request (HMAC-SHA256); without one "
        "the peer endpoints do not exist and no peer is used. Also GATEWAY_PEER_SECRET.",
    )
    nodes: list[str] = Field(
        default_factory=list, description="Base URLs of peers, e.g. http://192.168.1.20:8000."
    )
    discover: bool = Field(
        False,
        description="Advertise this node and find peers on the LAN with mDNS "
        "(_onemac-gateway._tcp); merged with nodes, which win. Needs secret and a host other "
        "than loopback (or loopback discover_interfaces, for a test on one machine).",
    )
    discover_interfaces: list[str] = Field(
        default_factory=list,
        description="IPv4 addresses to advertise and browse on (default: host's, or every LAN "
        "address when host is 0.0.0.0). Loopback only when listed here (one machine, tests).",
    )
    discover_ttl_seconds: float = Field(
        120.0,
        gt=0,
        description="TTL of this node's advertisement: a discovered peer that stops answering "
        "is dropped after its TTL.",
    )
    node_id: str | None = Field(None, description="This node's name (default: host:port).")
    heartbeat_seconds: float = Field(2.0, gt=0, description="How often peers are asked hello.")
    stall_seconds: float = Field(
        10.0, gt=0, description="A ticket with no event for this long has failed (failover)."
    )
    replay_window_seconds: float = Field(
        30.0, gt=0, description="Signed requests older or newer than this are refused."
    )

    @model_validator(mode="after")
    def _check(self) -> PeerSettings:
        if self.discover and not self.secret:
            raise ValueError(
                "peers.discover needs peers.secret (or GATEWAY_PEER_SECRET): a discovered peer "
                "is trusted only through requests signed with it"
            )
        for address in self.discover_interfaces:
            try:
                ipaddress.IPv4Address(address)
            except ValueError:
                raise ValueError(
                    f"peers.discover_interfaces: {address!r} is not an IPv4 address"
                ) from None
        if self.nodes and not self.secret:
            raise ValueError("peers.nodes needs peers.secret (or GATEWAY_PEER_SECRET)")
        return self


class CacheSettings(_Section):
    prefix_cache_bytes: int = Field(
        2 * 1024**3, ge=0, description="Byte budget of the prefix KV-cache store (LRU)."
    )
    hint_idle_seconds: float = Field(120.0, gt=0, description="A typing hint expires after this.")
    persist_prefix_bytes: int = Field(
        1024**3,
        ge=0,
        description="Byte budget of prefix KV caches saved to disk (complete typing hints, "
        "and the in-memory entries at shutdown), reloaded after a restart; 0: none.",
    )
    speculate_after_seconds: float = Field(
        0.6,
        ge=0,
        description="After this pause in typing, the answer's first tokens are "
        "computed ahead (hints with a draft).",
    )
    speculate_tokens: int = Field(
        16, ge=0, description="How many tokens to compute ahead; 0: no speculation."
    )
    persist_folder: Path | None = Field(
        None, description="Where they are saved (default: <cache_dir>/prefix-cache)."
    )


class ResponsesSettings(_Section):
    """Stored responses of the Responses API (``store: true``), in SQLite."""

    path: Path | None = Field(
        None, description="The database file (default: <cache_dir>/responses.sqlite3)."
    )
    max_stored: int = Field(
        10_000, ge=1, description="Responses kept; the oldest beyond this are pruned."
    )
    max_age_days: float = Field(
        30.0, gt=0, description="Responses older than this are pruned (and not found)."
    )
    unsupported_tools: Literal["error", "drop"] = Field(
        "error",
        description="Hosted tools the gateway cannot run (web_search, file_search, "
        "code_interpreter, computer_use, image_generation, mcp, ...): 'error' refuses the "
        "request with a 400 naming the tool; 'drop' leaves them out (logged, and named in the "
        "response's metadata), for agents that offer them by default (Codex CLI's web_search).",
    )


class ClusterHostSettings(_Section):
    """One host of a distributed tier, as in ``mlx.launch``'s hostfile."""

    ssh: str = Field(description="How ssh reaches it; '127.0.0.1' for this machine (no ssh).")
    ips: list[str] = Field(
        default_factory=list, description="Addresses the ranks connect over (ring, JACCL)."
    )
    rdma: list[str | None] = Field(
        default_factory=list, description="JACCL: the RDMA device towards each rank (null: self)."
    )


class ClusterSettings(_Section):
    """``[tiers.NAME.cluster]`` of a tier of kind ``mlx-distributed``: the hosts ``mlx.launch``
    runs ``mlx_lm.server`` on. Rank 0 (the first host) is this machine and serves the gateway
    on 127.0.0.1; the model folder and the Python environment have the same paths on every
    host."""

    hosts: list[str | ClusterHostSettings] = Field(
        default_factory=list,
        description="One entry per rank, rank 0 first (this machine): an IP address, or "
        "{ssh, ips, rdma} as in mlx.launch's hostfile.",
    )
    hostfile: Path | None = Field(
        None,
        description="Instead of hosts: an mlx.launch hostfile (JSON, e.g. written by "
        "mlx.distributed_config), relative to the config file.",
    )
    backend: Literal["ring", "jaccl", "jaccl-ring", "mpi"] = Field(
        "ring", description="MLX's distributed backend: jaccl over Thunderbolt 5 (RDMA)."
    )
    sharding: Literal["pipeline", "tensor"] = Field(
        "pipeline",
        description="pipeline: each rank holds a run of layers (mlx_lm.server --pipeline); "
        "tensor: each layer's matrices are split over the ranks.",
    )
    port: int | None = Field(
        None, ge=1, le=65535, description="Rank 0's HTTP port on 127.0.0.1 (default: a free one)."
    )
    starting_port: int | None = Field(
        None, ge=1, le=65535, description="The ranks' first port (default: free ones each start)."
    )
    python: str | None = Field(
        None, description="The interpreter on every host (default: the gateway's own)."
    )
    env: dict[str, str] = Field(
        default_factory=dict, description="Environment variables for every rank."
    )
    server_args: list[str] = Field(
        default_factory=list,
        description="More mlx_lm.server flags, e.g. ['--prompt-cache-size', '4'].",
    )
    start_timeout_seconds: float = Field(
        600.0, gt=0, description="From launch until rank 0's first token (loading included)."
    )
    wait_ready_seconds: float = Field(
        60.0, ge=0, description="A request waits this long for a starting cluster, then 503."
    )
    max_restarts: int = Field(
        5, ge=0, description="Relaunches within restart_window_seconds before giving up."
    )
    restart_window_seconds: float = Field(600.0, gt=0)
    liveness_interval_seconds: float = Field(
        15.0,
        ge=0,
        description="A ready cluster is asked for one token this often (0: never); a rank "
        "that hangs without dying (stopped, deadlocked) leaves rank 0 answering HTTP but "
        "generating nothing.",
    )
    liveness_timeout_seconds: float = Field(
        30.0, gt=0, description="A liveness probe's token must come within this."
    )
    liveness_failures: int = Field(
        2, ge=1, description="Probes in a row without a token before the cluster is relaunched."
    )

    @model_validator(mode="after")
    def _check(self) -> ClusterSettings:
        if bool(self.hosts) == (self.hostfile is not None):
            raise ValueError("a cluster needs hosts or hostfile (one of them)")
        return self


class TierSettings(_Section):
    """One tier: a local model (``kind = "mlx"``), an OpenAI-compatible upstream, or a model
    sharded over several Macs by MLX's own distributed engine (``kind = "mlx-distributed"``)."""

    kind: Literal["mlx", "openai", "mlx-distributed"] = "mlx"
    model: str = Field(
        description="mlx: a model reference (gateway.modelstore.sources): a known id, a folder "
        "or .gguf path (relative to this file's folder), hf:org/name[@revision][:file], "
        "ollama:name[:tag] or lmstudio:publisher/model[:file]; openai: the upstream's model "
        "name."
    )
    keep_alive_seconds: float = Field(
        300.0, ge=0, description="mlx: unload after this long unused (0 = never)."
    )
    preload: bool = Field(False, description="mlx: load at start instead of on first use.")
    temperature: float | None = Field(
        None,
        ge=0.0,
        le=2.0,
        description="The sampling temperature of requests that set none (as llama.cpp's --temp "
        "or an Ollama Modelfile's temperature); default: the wire format's own (1.0). Agents "
        "that send none (Codex CLI) then decode as this tier's model does best.",
    )
    repetition_penalty: float | None = Field(
        None,
        gt=0.0,
        le=2.0,
        description="The repetition penalty of requests that set none (llama.cpp's "
        "--repeat-penalty, an Ollama Modelfile's repeat_penalty; mlx-lm's processor over the "
        "completion's last 64 tokens): above 1 a small model loops less (1.1 is common); "
        "default: off, the model's own distribution.",
    )
    speculation: Literal["lookup", "off"] = Field(
        "lookup",
        description="mlx: speculative decoding. 'lookup' drafts the next tokens from the "
        "prompt and the output so far (an edit repeats the code it was sent) and verifies "
        "them in one pass; it stops drafting while that does not pay. 'off': one token a "
        "step. With draft_model, the draft model drafts instead.",
    )
    decode_step: Literal["compiled", "eager"] = Field(
        "compiled",
        description="mlx: 'compiled' traces a decode step's pass once per KV buffer size "
        "(mx.compile) and replays it, where the model takes it (/health says whether, and "
        "why not); 'eager' builds it anew at every step, as mlx-lm does.",
    )
    max_sequences: int = Field(
        8,
        ge=1,
        le=64,
        description="mlx: how many generations of this tier decode together in the one "
        "inference slot (one pass per step for all: decode reads every weight once whatever "
        "the batch). Fewer when the memory left for their KV caches, at the model's full "
        "context, cannot hold that many (/health says which). 1: one at a time.",
    )
    draft_model: str | None = Field(
        None,
        description="mlx: a smaller model (any reference 'model' accepts) that drafts tokens "
        "for this tier's model, verified by it (the output stays the model's own). It must "
        "share the model's tokenizer; its memory counts in the tier's.",
    )
    weights: Literal["auto", "4bit", "float32"] | None = Field(
        None,
        description="mlx, Linux CPU: hold the weights quantized (float32 activations) or "
        "dequantized to float32; auto: float32 when that copy takes at most half of "
        "memory_budget_bytes (default: the top-level weights setting).",
    )
    experts: Literal["resident", "stream"] = Field(
        "resident",
        description="mlx, mixture-of-experts models: 'stream' keeps only the shared layers and "
        "a few expert slots per layer in memory and reads routed experts from disk (a model "
        "larger than memory; gateway.engines.experts).",
    )
    expert_slots: int | None = Field(
        None, ge=1, description="experts = 'stream': experts held per MoE layer."
    )
    expert_cache_bytes: int | None = Field(
        None,
        ge=1,
        description="experts = 'stream': bytes for the slots of all layers (instead of "
        "expert_slots). Neither: an eighth of the experts, at least twice those of a token.",
    )
    expert_policy: Literal["lfu", "lru"] = Field(
        "lfu", description="experts = 'stream': which expert gives its slot up."
    )
    base_url: str | None = Field(None, description="openai: e.g. http://127.0.0.1:8080/v1")
    api_key: str | None = Field(
        None, description="openai: the upstream's key (never the client's)."
    )
    same_machine: bool | None = Field(
        None,
        description="openai: the upstream computes on this Mac, so its requests take the one "
        "inference slot. Default: true when base_url is a loopback address.",
    )
    connect_timeout_seconds: float = Field(5.0, gt=0)
    read_timeout_seconds: float = Field(
        120.0, gt=0, description="openai: longest silence between two streamed chunks."
    )
    context_length: int | None = Field(
        None, ge=1, description="openai: the upstream's context, if you want it checked here."
    )
    cluster: ClusterSettings | None = Field(
        None, description="mlx-distributed: the hosts, backend and sharding (ClusterSettings)."
    )

    @model_validator(mode="after")
    def _check(self) -> TierSettings:
        streaming = ("expert_slots", "expert_cache_bytes")
        if self.experts == "stream" and self.kind != "mlx":
            raise ValueError("experts = 'stream' is only for tiers of kind 'mlx'")
        if self.experts != "stream" and any(getattr(self, k) is not None for k in streaming):
            raise ValueError("expert_slots and expert_cache_bytes need experts = 'stream'")
        if self.expert_slots is not None and self.expert_cache_bytes is not None:
            raise ValueError("set expert_slots or expert_cache_bytes, not both")
        if self.kind == "openai":
            if not self.base_url:
                raise ValueError("a tier of kind 'openai' needs base_url")
            if not self.base_url.startswith(("http://", "https://")):
                raise ValueError(f"base_url must start with http:// or https://: {self.base_url}")
        elif self.base_url:
            raise ValueError("base_url is only for tiers of kind 'openai'")
        elif (self.kind == "mlx-distributed") != (self.cluster is not None):
            raise ValueError("a [cluster] section goes with kind 'mlx-distributed', and only there")
        else:
            parse_model_ref(self.model)  # the syntax now; whether it exists, at start
        return self


def default_memory_budget() -> int:
    """Three quarters of physical memory: room for the OS and the KV caches."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        total = 16 * 1024**3
    return int(total * 0.75)


class Settings(_Section):
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    api_key: str | None = Field(
        None, description="Bearer secret; required when binding beyond loopback."
    )
    cache_dir: Path = Field(default_factory=default_cache_dir)
    default_model: str = Field(
        DEFAULT_MODEL_ID,
        description="The model of the implicit tier when no tiers are set (a model reference, "
        "as a tier's model).",
    )
    tiers: dict[str, TierSettings] = Field(
        default_factory=dict,
        description="Named tiers; none: one tier 'default' on default_model, loaded at start.",
    )
    default_tier: str | None = Field(
        None, description="The tier used when a request names none (default: the first)."
    )
    memory_budget_bytes: int = Field(
        default_factory=default_memory_budget,
        ge=0,
        description="Bytes all loaded local models may hold together (least recently used "
        "idle models are unloaded to make room).",
    )
    task_folders: list[Path] = Field(
        default_factory=list,
        description="Folders of task type files (*.toml), read after the built-in prompts/; "
        "a file of the same name overrides a built-in task type.",
    )
    aliases: dict[str, str] = Field(
        default_factory=dict,
        description="Extra model names clients may use (e.g. gpt-4o-mini) -> a tier or model id.",
    )
    weights: Literal["auto", "4bit", "float32"] = Field(
        "auto",
        description="Linux CPU: the form of local models' weights (gateway.engines.weights); "
        "auto chooses per model. Apple Silicon keeps each model's own form.",
    )
    max_request_bytes: int = Field(4 * 1024**2, ge=1024)
    request_body_seconds: float = Field(
        30.0,
        gt=0,
        description="A request's body must have arrived this long after its headers (408).",
    )
    max_completion_tokens: int | None = Field(
        None,
        ge=1,
        description="A cap on generated tokens per request (a larger max_tokens is a 400; "
        "without one a completion ends at the cap). Default: the model's context.",
    )
    log_level: Literal["critical", "error", "warning", "info", "debug"] = Field(
        "info", description="The gateway's log level (debug: e.g. each prefill chunk's time)."
    )
    shutdown_grace_seconds: float = Field(
        10.0,
        ge=0,
        description="On SIGTERM/SIGINT, running generations may finish for this long.",
    )
    scheduler: SchedulerSettings = SchedulerSettings()
    cache: CacheSettings = CacheSettings()
    peers: PeerSettings = PeerSettings()
    responses: ResponsesSettings = ResponsesSettings()

    @model_validator(mode="after")
    def _check(self) -> Settings:
        parse_model_ref(self.default_model)
        if not self.tiers:
            self.tiers = {
                IMPLICIT_TIER: TierSettings(
                    kind="mlx", model=self.default_model, keep_alive_seconds=0, preload=True
                )
            }
        if self.default_tier is None:
            self.default_tier = next(iter(self.tiers))
        elif self.default_tier not in self.tiers:
            raise ValueError(f"default_tier {self.default_tier!r} is not a configured tier")
        names = set(self.tiers) | {t.model for t in self.tiers.values()}
        for alias, target in self.aliases.items():
            if target not in names:
                raise ValueError(
                    f"alias {alias!r} points to {target!r}, which is neither a tier nor a model"
                )
        self._check_discovery()
        return self

    def _check_discovery(self) -> None:
        """Never advertise a gateway that listens on loopback only: LAN peers could not reach
        it. Loopback discovery is for one machine (tests) and must be asked for by address."""
        peers = self.peers
        if not peers.discover or self.host not in LOOPBACK_HOSTS:
            return
        interfaces = peers.discover_interfaces
        if not interfaces or not all(ipaddress.ip_address(a).is_loopback for a in interfaces):
            raise ValueError(
                f"peers.discover: the gateway listens on {self.host} only, so LAN peers could "
                "not reach it; bind a LAN address (host, which needs api_key), or set "
                'peers.discover_interfaces = ["127.0.0.1"] to discover on this machine only'
            )

    @property
    def exposed(self) -> bool:
        return self.host not in LOOPBACK_HOSTS


class ConfigError(Exception):
    """The configuration cannot be used; the message says why."""


def _anchor_model_paths(data: dict[str, Any], base: Path) -> None:
    """A relative model path in the file means relative to the file's folder, not to wherever
    the gateway was started; aliases that named it follow."""
    moved: dict[str, str] = {}
    tiers = data.get("tiers")
    tables = tiers.values() if isinstance(tiers, dict) else []
    local = ("mlx", "mlx-distributed")
    entries = [t for t in tables if isinstance(t, dict) and t.get("kind", "mlx") in local]
    for entry in entries:
        cluster = entry.get("cluster")
        if not isinstance(cluster, dict):
            continue
        hostfile = cluster.get("hostfile")
        if isinstance(hostfile, str) and not Path(hostfile).expanduser().is_absolute():
            cluster["hostfile"] = str(base / Path(hostfile).expanduser())
    for holder, key in [*((t, "model") for t in entries), (data, "default_model")]:
        value = holder.get(key)
        if isinstance(value, str) and is_relative_path(value):
            holder[key] = moved[value] = str(base / Path(value).expanduser())
    aliases = data.get("aliases")
    if isinstance(aliases, dict):
        for alias, target in aliases.items():
            aliases[alias] = moved.get(target, target)


_ENV = {
    "GATEWAY_HOST": "host",
    "GATEWAY_PORT": "port",
    "GATEWAY_API_KEY": "api_key",
    "GATEWAY_CACHE_DIR": "cache_dir",
    "GATEWAY_DEFAULT_MODEL": "default_model",
}


def load_settings(
    config_file: str | Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """Merge defaults, the TOML file, the environment and ``overrides`` (flags)."""
    env = os.environ if environ is None else environ
    data: dict[str, Any] = {}
    path = config_file or env.get("GATEWAY_CONFIG")
    if path:
        try:
            data.update(tomllib.loads(Path(path).read_text()))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"cannot read config file {path}: {exc}") from exc
        _anchor_model_paths(data, Path(path).resolve().parent)
    for name, key in _ENV.items():
        if env.get(name):
            data[key] = env[name]
    if env.get("GATEWAY_PEER_SECRET"):
        data.setdefault("peers", {})["secret"] = env["GATEWAY_PEER_SECRET"]
    data.update({k: v for k, v in (overrides or {}).items() if v is not None})
    try:
        settings = Settings.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"invalid configuration: {exc}") from exc
    if settings.exposed and not settings.api_key:
        raise ConfigError(
            f"binding to {settings.host} makes the gateway reachable from the network; "
            "set an api_key (GATEWAY_API_KEY) first"
        )
    return settings
