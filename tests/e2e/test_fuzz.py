"""A short, bounded schemathesis run against the live gateway: no 5xx, every response as the
OpenAPI document describes it (error envelopes included)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from testsupport.process import RunningGateway, start_gateway

pytestmark = pytest.mark.e2e
# Fuzzed chats generate at most a few tokens: the run is about inputs, not the model's speed.
FUZZ_CONFIG = {
    "max_completion_tokens": 4,
    "scheduler": {"prefill_freeze_max_seconds": 1.0},
    "cache": {"hint_idle_seconds": 5.0},
}
CHECKS = "not_a_server_error,response_schema_conformance,status_code_conformance,content_type_conformance"


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    running = start_gateway(tmp_path_factory.mktemp("fuzz"), FUZZ_CONFIG)
    yield running
    running.stop()


def test_schemathesis_finds_no_server_error_or_schema_mismatch(
    gw: RunningGateway, tmp_path: Path
) -> None:
    schemathesis = Path(sys.executable).with_name("schemathesis")
    result = subprocess.run(
        [
            str(schemathesis),
            "run",
            f"{gw.base_url}/schema/openapi.json",
            "--checks",
            CHECKS,
            "--max-examples",
            os.environ.get("GATEWAY_FUZZ_EXAMPLES", "5"),
            "--workers",
            "1",
            "--phases",
            "coverage,fuzzing",
            "--seed",
            "1",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-4000:]
    assert "passed" in result.stdout
    assert httpx.get(f"{gw.base_url}/health", timeout=10).status_code == 200
