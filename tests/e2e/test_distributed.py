"""A tier served by MLX's own distributed engine, started and watched by the gateway: two
ranks on loopback (``mlx.launch --backend ring``) running ``mlx_lm.server``, pipeline- and
tensor-parallel, against the gateway's own single-process tier on the same weights.

The model is synthetic (mlx-lm's qwen2 class, random seeded weights, SmolLM2's tokenizer):
SmolLM2 (llama) has no pipeline split in mlx-lm, and its 9 attention heads do not divide over
two ranks for tensor sharding. Six layers, so each pipeline rank holds three.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from testsupport.process import RunningGateway, start_gateway
from testsupport.synthetic import SyntheticSpec, build_synthetic

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds ranks in /proc"),
]
SHARDINGS = ("pipeline", "tensor")
READY_SECONDS = 180  # two clusters of two ranks loading at once on a 2-core machine
QUESTION = [{"role": "user", "content": "Name three rivers of Europe."}]
NO_EOS = {"2": -100}  # <|im_end|>: keeps a random-weight model talking


def distributed_spec() -> SyntheticSpec:
    return SyntheticSpec(
        "qwen2",
        hidden_size=128,
        num_hidden_layers=6,
        intermediate_size=256,
        num_attention_heads=4,
        num_key_value_heads=2,
        weight_index=True,
    )


def cluster_tier(model: Path, sharding: str) -> dict[str, Any]:
    return {
        "kind": "mlx-distributed",
        "model": str(model),
        "read_timeout_seconds": 60,
        "cluster": {
            "hosts": ["127.0.0.1", "127.0.0.1"],
            "backend": "ring",
            "sharding": sharding,
            "start_timeout_seconds": READY_SECONDS,
            "wait_ready_seconds": READY_SECONDS,
            # Probed when idle every 2 s: a hung rank is found within ~2 + 2 x 8 s.
            "liveness_interval_seconds": 2,
            "liveness_timeout_seconds": 8,
        },
    }


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    workdir = tmp_path_factory.mktemp("distributed")
    model = build_synthetic(distributed_spec(), workdir / "qwen2-6l")
    config = {
        "cache_dir": str(workdir / "cache"),
        "tiers": {
            "single": {"kind": "mlx", "model": str(model), "weights": "float32"},
            **{sharding: cluster_tier(model, sharding) for sharding in SHARDINGS},
        },
    }
    running = start_gateway(workdir / "gateway", config)
    try:
        for sharding in SHARDINGS:
            wait_for_state(running, sharding, "ready")
        yield running
    finally:
        running.stop()


def wait_for_state(
    gw: RunningGateway, tier: str, state: str, restarts: int | None = None
) -> dict[str, Any]:
    """The tier's /health entry once it is in ``state`` (after ``restarts`` relaunches)."""
    deadline = time.monotonic() + READY_SECONDS
    while True:
        health = gw.http().get("/health").json()["tiers"][tier]
        count = health.get("cluster", {}).get("restarts")
        if health["state"] == state and restarts in (None, count):
            return dict(health)
        assert health["state"] != "failed", health
        assert time.monotonic() < deadline, f"{tier} not {state}: {health}\n{gw.log()[-3000:]}"
        time.sleep(0.5)


def greedy(gw: RunningGateway, tier: str, stream: bool) -> tuple[str, Any]:
    client = gw.openai()
    if not stream:
        reply = client.chat.completions.create(
            model=tier, messages=QUESTION, max_tokens=24, temperature=0, logit_bias=NO_EOS
        )
        return reply.choices[0].message.content or "", reply.usage
    chunks = client.chat.completions.create(
        model=tier,
        messages=QUESTION,
        max_tokens=24,
        temperature=0,
        logit_bias=NO_EOS,
        stream=True,
        stream_options={"include_usage": True},
    )
    text, usage = "", None
    for chunk in chunks:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
        usage = chunk.usage or usage
    return text, usage


@pytest.fixture(scope="module")
def single(gw: RunningGateway) -> str:
    """The one-process answer every cluster must give (computed once for the module)."""
    return greedy(gw, "single", stream=False)[0]


@pytest.mark.parametrize("sharding", SHARDINGS)
@pytest.mark.parametrize("stream", [False, True])
def test_two_ranks_answer_as_one_process_does(
    gw: RunningGateway, single: str, sharding: str, stream: bool
) -> None:
    reference = single
    text, usage = greedy(gw, sharding, stream)
    assert len(reference) > 20
    assert text == reference
    assert usage is not None and usage.completion_tokens == 24 and usage.prompt_tokens > 10


def test_health_and_metrics_show_each_cluster(gw: RunningGateway) -> None:
    health = gw.http().get("/health").json()["tiers"]
    for sharding in SHARDINGS:
        tier = health[sharding]
        assert (tier["kind"], tier["state"], tier["loaded"]) == ("mlx-distributed", "ready", True)
        cluster = tier["cluster"]
        assert (cluster["ranks"], cluster["backend"], cluster["sharding"]) == (2, "ring", sharding)
        assert cluster["rank0_url"].startswith("http://127.0.0.1:")
    models = {m.id: m.model_dump() for m in gw.openai().models.list().data}
    assert models["pipeline"]["kind"] == "mlx-distributed"
    metrics = gw.http().get("/metrics").text
    line = 'gateway_cluster_state{gateway_cluster_state="ready",tier="pipeline"} 1.0'
    assert line in metrics


def ranks_of(cluster_pid: int) -> dict[int, int]:
    """rank -> pid of the ``python -m mlx_lm server`` processes in a cluster's process group."""
    ranks = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.getpgid(int(entry.name)) != cluster_pid:
                continue
            command = (entry / "cmdline").read_bytes().split(b"\0")
            environ = (entry / "environ").read_bytes().split(b"\0")
        except (OSError, ProcessLookupError):
            continue
        rank = [e for e in environ if e.startswith(b"MLX_RANK=")]
        if command[1:4] == [b"-m", b"mlx_lm", b"server"] and rank:
            ranks[int(rank[0].split(b"=")[1])] = int(entry.name)
    return ranks


def test_a_rank_killed_mid_stream_ends_the_stream_with_an_error_and_the_tier_recovers(
    gw: RunningGateway, single: str
) -> None:
    before = wait_for_state(gw, "pipeline", "ready")["cluster"]
    ranks = ranks_of(before["pid"])
    assert set(ranks) == {0, 1}
    stream = gw.openai().chat.completions.create(
        model="pipeline",
        messages=QUESTION,
        max_tokens=4000,
        temperature=0,
        logit_bias=NO_EOS,
        stream=True,
    )
    received = 0
    with pytest.raises(openai.APIError, match="upstream"):
        for chunk in stream:
            received += bool(chunk.choices and chunk.choices[0].delta.content)
            if received == 3:
                os.kill(ranks[1], signal.SIGKILL)
    assert received >= 3
    # The supervisor relaunches it; the whole old group is gone, no orphan left behind.
    after = wait_for_state(gw, "pipeline", "ready", restarts=before["restarts"] + 1)["cluster"]
    assert after["pid"] != before["pid"]
    assert ranks_of(before["pid"]) == {}
    assert greedy(gw, "pipeline", stream=True)[0] == single
    metrics = gw.http().get("/metrics").text
    # One more than before the kill (a launch that failed before it was ready, e.g. under
    # load, is a restart too: the count is relative).
    restarts = float(before["restarts"]) + 1
    assert f'gateway_cluster_restarts_total{{tier="pipeline"}} {restarts}' in metrics


def test_a_rank_that_hangs_without_dying_is_found_and_the_cluster_relaunched(
    gw: RunningGateway, single: str
) -> None:
    """SIGSTOP on rank 1: rank 0 still answers HTTP, but no token comes. The liveness probe
    finds it, the whole group is ended (a stopped process dies by SIGKILL) and relaunched,
    and the tier answers as before."""
    before = wait_for_state(gw, "tensor", "ready")["cluster"]
    ranks = ranks_of(before["pid"])
    assert set(ranks) == {0, 1}
    os.kill(ranks[1], signal.SIGSTOP)
    try:
        after = wait_for_state(gw, "tensor", "ready", restarts=before["restarts"] + 1)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(ranks[1], signal.SIGCONT)  # (gone already when the test passes)
    assert after["cluster"]["pid"] != before["pid"]
    assert ranks_of(before["pid"]) == {}
    assert "a rank hangs" in gw.log()
    assert greedy(gw, "tensor", stream=False)[0] == single


def test_stopping_the_gateway_stops_every_rank(gw: RunningGateway) -> None:
    """Last in this module: it stops the module's gateway."""
    groups = [wait_for_state(gw, t, "ready")["cluster"]["pid"] for t in SHARDINGS]
    assert all(len(ranks_of(pid)) == 2 for pid in groups)
    gw.stop()
    assert gw.process.returncode is not None
    deadline = time.monotonic() + 20
    while any(ranks_of(pid) for pid in groups) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert [ranks_of(pid) for pid in groups] == [{}, {}]
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{gw.base_url}/health", timeout=1)
