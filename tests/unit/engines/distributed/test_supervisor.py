"""The supervisor against a stand-in for mlx.launch: a script that serves rank 0's two
readiness endpoints on the port it is given (or exits at once), with a child "rank"."""

from __future__ import annotations

import asyncio
import os
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from gateway.engines.distributed.launch import ClusterHost, ClusterSpec
from gateway.engines.distributed.supervisor import ClusterState, ClusterSupervisor, RestartPolicy

FAKE_LAUNCHER = r"""
import http.server, json, os, subprocess, sys, time
mode, pids = sys.argv[1], sys.argv[2]
port = int(sys.argv[sys.argv.index("--port") + 1])
rank1 = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
with open(pids, "a") as f:
    f.write(f"{os.getpid()} {rank1.pid}\n")
if mode == "exit":
    print("[WARN] Node with rank 1 exited with code 1", flush=True)
    sys.exit(0)

class Rank0(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers()
    def do_POST(self):
        while os.path.exists(pids + ".hang"):  # a rank that hangs: no token ever comes
            time.sleep(0.05)
        body = json.dumps({"choices": [{"text": "x", "finish_reason": "length"}]}).encode()
        self.send_response(200); self.send_header("content-length", str(len(body)))
        self.end_headers(); self.wfile.write(body)
    def log_message(self, *args):
        pass

http.server.HTTPServer(("127.0.0.1", port), Rank0).serve_forever()
"""

FAST = RestartPolicy(
    start_timeout=20, max_restarts=2, restart_window=60, backoff_initial=0.01, stop_grace=2
)


def supervisor(tmp_path: Path, mode: str, states: list[ClusterState]) -> ClusterSupervisor:
    script = tmp_path / "fake_launch.py"
    script.write_text(FAKE_LAUNCHER)
    spec = ClusterSpec(
        model_folder=tmp_path,
        hosts=(ClusterHost("127.0.0.1"), ClusterHost("127.0.0.1")),
        launcher=(sys.executable, str(script), mode, str(tmp_path / "pids")),
    )
    return ClusterSupervisor(
        "t", spec, tmp_path / "work", FAST, listener=lambda state, _: states.append(state)
    )


def launched_pids(tmp_path: Path) -> list[int]:
    lines = (tmp_path / "pids").read_text().split()
    return [int(pid) for pid in lines]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie that nobody reaped yet is gone too.
    status = Path(f"/proc/{pid}/status")
    return not (status.exists() and "State:\tZ" in status.read_text())


async def all_gone(pids: list[int], within: float = 5.0) -> bool:
    """SIGKILL is delivered asynchronously: give the kernel a moment."""
    deadline = asyncio.get_running_loop().time() + within
    while any(alive(pid) for pid in pids):
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


async def wait_for(states: list[ClusterState], count: int) -> None:
    for _ in range(200):
        if len(states) >= count:
            return
        await asyncio.sleep(0.05)


async def test_a_cluster_that_never_answers_is_retried_with_a_bound_then_failed(
    tmp_path: Path,
) -> None:
    states: list[ClusterState] = []
    cluster = supervisor(tmp_path, "exit", states)
    cluster.start()
    assert not await cluster.wait_ready(20)
    assert cluster.state == "failed"
    assert states == ["starting", "restarting", "restarting", "failed"]
    assert cluster.restarts == 2
    assert cluster.reason is not None and "rank 1 exited with code 1" in cluster.reason
    assert await all_gone(launched_pids(tmp_path))  # no orphaned rank
    await cluster.stop()


async def test_ready_once_rank_0_answers_restarted_when_it_dies_stopped_with_its_group(
    tmp_path: Path,
) -> None:
    states: list[ClusterState] = []
    cluster = supervisor(tmp_path, "serve", states)
    cluster.start()
    assert await cluster.wait_ready(20)
    launcher, rank1 = launched_pids(tmp_path)
    os.kill(launcher, 9)
    await wait_for(states, 3)
    assert await cluster.wait_ready(20)
    assert states == ["starting", "ready", "restarting", "ready"]
    assert await all_gone([rank1])  # the dead launch's other rank went with its group
    pids = launched_pids(tmp_path)[2:]
    assert all(alive(pid) for pid in pids)
    await cluster.stop()
    assert cluster.state == "stopped"
    assert await all_gone(pids)


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
async def test_describe_says_what_health_shows(tmp_path: Path) -> None:
    cluster = supervisor(tmp_path, "serve", [])
    cluster.start()
    assert await cluster.wait_ready(20)
    described = cluster.describe()
    assert described["state"] == "ready" and described["ranks"] == 2
    assert described["rank0_url"] == f"http://127.0.0.1:{cluster.port}/v1"
    await cluster.stop()


async def test_a_cluster_that_hangs_is_found_by_the_liveness_probe_and_relaunched(
    tmp_path: Path,
) -> None:
    """Rank 0 stops answering completions (a rank hangs): two probes in a row get no token
    and the launch is ended and relaunched; while a request is in flight nobody probes."""
    states: list[ClusterState] = []
    cluster = supervisor(tmp_path, "serve", states)
    cluster.policy = replace(FAST, liveness_interval=0.2, liveness_timeout=0.5, liveness_failures=2)
    cluster.start()
    assert await cluster.wait_ready(20)
    hang = tmp_path / "pids.hang"
    cluster.in_flight = 1  # a request's own read timeout watches it: no probe
    hang.touch()
    await asyncio.sleep(2.0)
    assert states == ["starting", "ready"]
    cluster.in_flight = 0
    await wait_for(states, 3)
    assert states[2] == "restarting" and "a rank hangs" in (cluster.reason or "")
    hang.unlink()
    assert await cluster.wait_ready(20)
    assert states == ["starting", "ready", "restarting", "ready"]
    await cluster.stop()
