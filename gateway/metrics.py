"""Every Prometheus metric family of the gateway, named in one place and one style.

Names follow Prometheus conventions with the ``gateway_`` prefix; where vLLM or llama.cpp
already have a well-known metric, ours is its counterpart (noted beside each family), so
existing dashboards map over directly.

The families are grouped by concern, one small class each, and each concern has one
writer: HTTP requests (the request middleware), the scheduler (its observer), generation
(the chat service: by model, by tier, prompt reuse and speculative decoding), the prefix
cache store, typing hints, speculation on hints, upstream servers, embeddings, model
residency, distributed clusters, peers and expert streaming. ``GatewayMetrics`` holds one
of each as an attribute (``metrics.peers``), all registered in one registry; the wiring
hands each service only its own concern (``PeerInbox(..., metrics.peers)``), so a service
cannot touch another's families and a test builds just the concern it reads.
"""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Enum, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160)
TPS_BUCKETS = (1, 2, 5, 10, 15, 20, 30, 50, 75, 100, 150, 200, 300, 500, 1000)
EXPERT_READ_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1)
CONTENT_TYPE = CONTENT_TYPE_LATEST


class RequestMetrics:
    """HTTP requests, counted by the outermost middleware."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "gateway_requests",
            "HTTP requests by route and status.",
            ["route", "status"],
            registry=registry,
        )


class SchedulerMetrics:
    """The inference slot, its queues and gates; the scheduler's observer
    (``gateway.scheduler.observer.SchedulerObserver``), so the scheduler reports its events
    here instead of importing this module. It publishes its lanes when it is built."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        # vllm:request_queue_time_seconds
        self.queue_wait = Histogram(
            "gateway_queue_wait_seconds",
            "Time a job waited for the inference slot before it first ran.",
            ["priority"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        # vllm:num_requests_waiting, llamacpp:requests_deferred
        self.queue_depth = Gauge(
            "gateway_queue_depth", "Jobs waiting for the slot.", ["priority"], registry=r
        )
        # vllm:num_requests_running, llamacpp:requests_processing
        self.slot_busy = Gauge("gateway_slot_busy", "1 while a job holds the slot.", registry=r)
        self.slot_busy_seconds = Counter(
            "gateway_slot_busy_seconds", "Seconds the inference slot was held.", registry=r
        )
        # vllm:num_requests_running: the jobs in the slot, decoding together (issue 33).
        self.slot_batch_jobs = Gauge(
            "gateway_slot_batch_jobs",
            "Jobs running in the inference slot together (their sequences decode in one "
            "pass per step).",
            registry=r,
        )
        # vllm:num_preemptions_total
        self.preemptions = Counter(
            "gateway_preemptions",
            "Jobs paused so that a user job could run, inside a pass of the model (between "
            "groups of layers) or between passes.",
            ["priority", "where"],
            registry=r,
        )
        self.paused_memory_released = Counter(
            "gateway_paused_memory_released",
            "Paused jobs that gave up their KV cache (recomputed on resume) to bound memory.",
            ["priority"],
            registry=r,
        )
        self.cancellations = Counter(
            "gateway_cancellations",
            "Jobs withdrawn (client gone, timeout) by where they were.",
            ["priority", "stage"],  # stage: queued | running | preempted
            registry=r,
        )
        self.rejections = Counter(
            "gateway_rejections",
            "Jobs refused or given up: queue full (429) or waited too long (503).",
            ["priority", "reason"],
            registry=r,
        )
        self.gate_closed = Gauge(
            "gateway_gate_closed", "1 while a scheduler gate holds work back.", ["gate"], registry=r
        )

    def job_rejected(self, lane: str, reason: str) -> None:
        self.rejections.labels(lane, reason).inc()

    def job_waited(self, lane: str, seconds: float) -> None:
        self.queue_wait.labels(lane).observe(seconds)

    def slot_taken(self) -> None:
        self.slot_busy.set(1)

    def slot_freed(self, held_seconds: float) -> None:
        self.slot_busy_seconds.inc(held_seconds)
        self.slot_busy.set(0)

    def batch_changed(self, jobs: int) -> None:
        self.slot_batch_jobs.set(jobs)

    def job_preempted(self, lane: str, inside_pass: bool) -> None:
        self.preemptions.labels(lane, "inside_pass" if inside_pass else "between_passes").inc()

    def job_cancelled(self, lane: str, stage: str) -> None:
        self.cancellations.labels(lane, stage).inc()

    def job_memory_released(self, lane: str) -> None:
        self.paused_memory_released.labels(lane).inc()

    def lanes_changed(self, gates_closed: Mapping[str, bool], depths: Mapping[str, int]) -> None:
        for name, closed in gates_closed.items():
            self.gate_closed.labels(name).set(1 if closed else 0)
        for lane, depth in depths.items():
            self.queue_depth.labels(lane).set(depth)


class GenerationMetrics:
    """What a chat generation took and gave, counted by the chat service: by model (vLLM's
    names), by tier and backend kind, how much of its prompt a KV cache held
    (vllm:prefix_cache_queries / prefix_cache_hits) and its speculative decoding."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        # vllm:time_to_first_token_seconds
        self.time_to_first_token = Histogram(
            "gateway_time_to_first_token_seconds",
            "Time from a request's arrival to its first generated token.",
            ["model", "cache"],  # cache: warm (part of the prompt reused) or cold
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        # vllm:prompt_tokens_total, llamacpp:prompt_tokens_total
        self.prompt_tokens = Counter(
            "gateway_prompt_tokens", "Prompt tokens of finished requests.", ["model"], registry=r
        )
        # vllm:generation_tokens_total, llamacpp:tokens_predicted_total
        self.generation_tokens = Counter(
            "gateway_generation_tokens", "Generated tokens.", ["model"], registry=r
        )
        # llamacpp:predicted_tokens_seconds
        self.decode_tokens_per_second = Histogram(
            "gateway_decode_tokens_per_second",
            "Decode speed of a finished generation (after its first token).",
            ["model"],
            buckets=TPS_BUCKETS,
            registry=r,
        )
        self.prompt_tokens_cached = Counter(
            "gateway_prompt_tokens_cached",
            "Prompt tokens served from a KV cache.",
            ["model"],
            registry=r,
        )
        self.prompt_tokens_computed = Counter(
            "gateway_prompt_tokens_computed", "Prompt tokens prefilled.", ["model"], registry=r
        )
        self._add_by_tier(r)

    def _add_by_tier(self, r: CollectorRegistry) -> None:
        """The same request measured per tier and backend kind, and its drafted tokens."""
        self.tier_requests = Counter(
            "gateway_tier_requests",
            "Chat requests by tier, backend kind and outcome (ok, error, cancelled).",
            ["tier", "kind", "outcome"],
            registry=r,
        )
        self.tier_time_to_first_token = Histogram(
            "gateway_tier_time_to_first_token_seconds",
            "Time from a request's arrival to its first token, by tier and backend kind.",
            ["tier", "kind"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.tier_tokens = Counter(
            "gateway_tier_tokens",
            "Tokens by tier, backend kind and direction (prompt, generation).",
            ["tier", "kind", "direction"],
            registry=r,
        )
        self.speculative_drafted = Counter(
            "gateway_speculative_drafted_tokens",
            "Tokens drafted for speculative decoding, by tier and method (lookup, draft_model).",
            ["tier", "method"],
            registry=r,
        )
        self.speculative_accepted = Counter(
            "gateway_speculative_accepted_tokens",
            "Drafted tokens the model accepted (each one a decode step saved), by tier and method.",
            ["tier", "method"],
            registry=r,
        )


class PrefixCacheMetrics:
    """The prefix KV-cache store's size (the tokens it saves are counted per generation)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.prefix_cache_bytes = Gauge(
            "gateway_prefix_cache_bytes",
            "Bytes held by the prefix KV-cache store.",
            registry=registry,
        )


class HintMetrics:
    """Typing hints (no vLLM/llama.cpp counterpart)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.typing_hints = Counter(
            "gateway_typing_hints", "Typing hints by outcome.", ["outcome"], registry=registry
        )
        self.typing_hints_posted = Counter(
            "gateway_typing_hints_posted", "Typing hints accepted (202).", registry=registry
        )


class SpeculationMetrics:
    """The speculative first tokens a typing hint allows (no vLLM/llama.cpp counterpart:
    nobody else sees the draft)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.speculations = Counter(
            "gateway_speculations",
            "Speculative first tokens: started, used, discarded_<reason> (mismatch, sampling, "
            "incomplete, preempted, superseded, unused, expired, failed).",
            ["event"],
            registry=registry,
        )
        self.speculated_tokens_served = Counter(
            "gateway_speculated_tokens_served",
            "Tokens sent to clients from a speculation instead of being generated on Enter.",
            registry=registry,
        )


class UpstreamMetrics:
    """Upstream servers (OpenAI-compatible tiers and clusters' rank 0)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.upstream_errors = Counter(
            "gateway_upstream_errors",
            "Failures of upstream servers by tier and kind (timeout, transport, http_5xx...).",
            ["tier", "error"],
            registry=registry,
        )


class EmbeddingMetrics:
    """Embeddings (vllm:request_success_total and vllm:prompt_tokens_total of a pooling
    model): requests and the tokens of their inputs."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.embedding_requests = Counter(
            "gateway_embedding_requests",
            "Embedding requests by tier and outcome (ok, error, cancelled).",
            ["tier", "outcome"],
            registry=registry,
        )
        self.embedding_input_tokens = Counter(
            "gateway_embedding_input_tokens",
            "Tokens of the inputs embedded, by tier.",
            ["tier"],
            registry=registry,
        )


class ResidencyMetrics:
    """Ollama's load/unload cycle of local models, as metrics."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.model_loads = Counter(
            "gateway_model_loads", "Local models loaded into memory.", ["tier"], registry=r
        )
        self.model_unloads = Counter(
            "gateway_model_unloads",
            "Local models unloaded, by reason (keep_alive, budget, shutdown).",
            ["tier", "reason"],
            registry=r,
        )
        self.model_load_seconds = Histogram(
            "gateway_model_load_seconds",
            "Time to load a local model (in the inference slot).",
            ["tier"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.model_loaded_bytes = Gauge(
            "gateway_model_loaded_bytes",
            "Memory held by a tier's loaded model (0 when unloaded).",
            ["tier"],
            registry=r,
        )


class ClusterMetrics:
    """Distributed tiers (``gateway.engines.distributed``): mlx.launch clusters the gateway
    runs."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.cluster_state = Enum(
            "gateway_cluster_state",
            "A distributed tier's cluster: starting, ready, restarting, failed or stopped.",
            ["tier"],
            states=["starting", "ready", "restarting", "failed", "stopped"],
            registry=registry,
        )
        self.cluster_restarts = Counter(
            "gateway_cluster_restarts",
            "Relaunches of a distributed tier's cluster after it died or never became ready.",
            ["tier"],
            registry=registry,
        )


class PeerMetrics:
    """Peers (no vLLM/llama.cpp counterpart): tickets between gateways, their failures and
    the peers known."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.peer_tickets_sent = Counter(
            "gateway_peer_tickets_sent",
            "Tickets sent to a peer, by outcome (ok, failed_over, refused, cancelled).",
            ["peer", "outcome"],
            registry=r,
        )
        self.peer_tickets_received = Counter(
            "gateway_peer_tickets_received",
            "Tickets received from peers, by outcome (ok, busy, refused, error, cancelled).",
            ["outcome"],
            registry=r,
        )
        self.peer_failures = Counter(
            "gateway_peer_failures",
            "Peer failures by kind (unreachable, stalled, died, incompatible, refused).",
            ["peer", "reason"],
            registry=r,
        )
        self.peer_auth_refused = Counter(
            "gateway_peer_auth_refused",
            "Peer requests refused by this node, by reason (signature, timestamp, replay, "
            "unsigned, tasks_hash, protocol).",
            ["reason"],
            registry=r,
        )
        self._add_peer_timing_and_presence(r)

    def _add_peer_timing_and_presence(self, r: CollectorRegistry) -> None:
        self.peer_ticket_seconds = Histogram(
            "gateway_peer_ticket_seconds",
            "Time from sending a ticket to its last event.",
            ["peer"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.peer_first_token_seconds = Histogram(
            "gateway_peer_first_token_seconds",
            "Time from sending a ticket to its first token.",
            ["peer"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.peer_up = Gauge(
            "gateway_peer_up",
            "1 when a peer answers its heartbeat and is compatible.",
            ["peer"],
            registry=r,
        )
        self.peers_discovered = Gauge(
            "gateway_peers_discovered",
            "Peers found on the LAN (mDNS), by state: used, or refused (other task definitions "
            "or protocol).",
            ["state"],
            registry=r,
        )


class ExpertMetrics:
    """Expert streaming (``gateway.engines.experts``). No vLLM/llama.cpp counterpart; the
    hits and misses are counted per MoE layer and step (one lookup per routed expert)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.expert_cache_hits = Counter(
            "gateway_expert_cache_hits",
            "Routed experts already in their layer's slots.",
            ["tier"],
            registry=r,
        )
        self.expert_cache_misses = Counter(
            "gateway_expert_cache_misses",
            "Routed experts read from disk into a slot.",
            ["tier"],
            registry=r,
        )
        self.expert_bytes_read = Counter(
            "gateway_expert_bytes_read",
            "Bytes of experts read from the weights files.",
            ["tier"],
            registry=r,
        )
        self.expert_read_seconds = Histogram(
            "gateway_expert_read_seconds",
            "Time to bring one layer's missing experts of a step in (read, convert, place).",
            ["tier"],
            buckets=EXPERT_READ_BUCKETS,
            registry=r,
        )


class GatewayMetrics:
    """The gateway's metric families: one concern per attribute, all in one registry of
    their own (two gateways in one process, as in tests, do not share families)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry or CollectorRegistry()
        self.requests = RequestMetrics(r)
        # The scheduler's observer (``gateway.scheduler.observer.SchedulerObserver``).
        self.scheduler = SchedulerMetrics(r)
        self.generation = GenerationMetrics(r)
        self.prefix_cache = PrefixCacheMetrics(r)
        self.hints = HintMetrics(r)
        self.speculation = SpeculationMetrics(r)
        self.upstream = UpstreamMetrics(r)
        self.embeddings = EmbeddingMetrics(r)
        self.residency = ResidencyMetrics(r)
        self.clusters = ClusterMetrics(r)
        self.peers = PeerMetrics(r)
        self.experts = ExpertMetrics(r)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
