from __future__ import annotations

from collections.abc import Iterator

import pytest

from bench.process import RunningGateway, start_gateway

MODEL = "smollm2-135m-instruct"


@pytest.fixture(scope="session")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    """The gateway with its defaults and one alias, shared by most end-to-end tests."""
    running = start_gateway(tmp_path_factory.mktemp("gateway"), {"aliases": {"gpt-4o-mini": MODEL}})
    yield running
    running.stop()
