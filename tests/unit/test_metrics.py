"""The metric families: one registry, each family once, and the scheduler's events on them."""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from gateway.metrics import GatewayMetrics, PeerMetrics, SchedulerMetrics
from gateway.scheduler.observer import SchedulerObserver


def samples(metrics: GatewayMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = metrics.exposition().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_every_family_is_named_once_in_the_gateway_style() -> None:
    metrics = GatewayMetrics()
    names = [f.name for f in text_string_to_metric_families(metrics.exposition().decode())]
    assert len(names) == len(set(names)) and len(names) >= 40
    assert all(name.startswith("gateway_") for name in names)
    # Two gateways in one process (tests) each have their own registry.
    assert GatewayMetrics().registry is not metrics.registry


def test_a_concern_registers_alone_on_a_registry_it_is_given() -> None:
    registry = CollectorRegistry()
    peers = PeerMetrics(registry)
    peers.peer_up.labels("b").set(1)
    assert registry.get_sample_value("gateway_peer_up", {"peer": "b"}) == 1
    assert registry.get_sample_value("gateway_slot_busy") is None  # not this concern's


def test_the_scheduler_s_events_move_their_series() -> None:
    metrics = GatewayMetrics()
    observer: SchedulerObserver = metrics.scheduler
    assert isinstance(metrics.scheduler, SchedulerMetrics)
    observer.job_rejected("user", "queue_full")
    observer.job_waited("task", 0.3)
    observer.slot_taken()
    taken = samples(metrics)[("gateway_slot_busy", ())]
    observer.slot_freed(2.5)
    observer.job_preempted("background", True)
    observer.job_cancelled("user", "queued")
    observer.job_memory_released("background")
    observer.lanes_changed({"typing": True, "memory": False}, {"user": 3})
    seen = samples(metrics)
    assert taken == 1 and seen[("gateway_slot_busy", ())] == 0
    assert seen[("gateway_slot_busy_seconds_total", ())] == 2.5
    assert seen[("gateway_rejections_total", (("priority", "user"), ("reason", "queue_full")))] == 1
    assert seen[("gateway_queue_wait_seconds_count", (("priority", "task"),))] == 1
    inside = (("priority", "background"), ("where", "inside_pass"))
    assert seen[("gateway_preemptions_total", inside)] == 1
    assert seen[("gateway_cancellations_total", (("priority", "user"), ("stage", "queued")))] == 1
    assert seen[("gateway_paused_memory_released_total", (("priority", "background"),))] == 1
    assert seen[("gateway_gate_closed", (("gate", "typing"),))] == 1
    assert seen[("gateway_gate_closed", (("gate", "memory"),))] == 0
    assert seen[("gateway_queue_depth", (("priority", "user"),))] == 3
