from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from testsupport.process import RunningGateway, start_gateway

MODEL = "smollm2-135m-instruct"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test under tests/e2e starts the real gateway: marked ``e2e``, so that
    ``make test-unit`` (``-m "not e2e"``) leaves them all out, whichever module forgot."""
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    """The gateway with its defaults and one alias, shared by most end-to-end tests."""
    running = start_gateway(tmp_path_factory.mktemp("gateway"), {"aliases": {"gpt-4o-mini": MODEL}})
    yield running
    running.stop()
