"""Opening and closing the gateway's services (``open_services``), and the local-model kit
that a gateway running its own models needs (``MLXModelKit``; tests give a runner factory)."""

from gateway.wiring.kit import (
    GivenRunnerKit,
    LocalModelKit,
    MLXModelKit,
    RunnerFactory,
    resolve_model,
)
from gateway.wiring.services import Services, open_services
from gateway.wiring.tiers import prefix_disk_folder

__all__ = [
    "GivenRunnerKit",
    "LocalModelKit",
    "MLXModelKit",
    "RunnerFactory",
    "Services",
    "open_services",
    "prefix_disk_folder",
    "resolve_model",
]
