"""Starts a cluster, keeps it up and stops it: the lifecycle of one ``mlx.launch``.

States: ``starting`` (first launch, until rank 0 has produced a token), ``ready``,
``restarting`` (it died or never became ready; relaunched after a backoff), ``failed``
(``max_restarts`` failures within ``restart_window``: it stays down, the log's tail says why)
and ``stopped``. Readiness is a one-token completion, not just an open port: mlx_lm.server
answers HTTP while its ranks are still loading and connecting.

Once ready, rank 0 is asked for one token every ``liveness_interval`` (the liveness probe):
a rank that hangs without dying (stopped, deadlocked in a collective) leaves rank 0's HTTP
server answering but generating nothing, and every request to the tier would wait for it.
``liveness_failures`` probes in a row without a token within ``liveness_timeout`` end the
launch, which is then relaunched as if it had died. The probe waits while a request is in
flight (``in_flight``, kept by the tier's backend): it would be batched with it by
mlx_lm.server, and that request has its own read timeout.

The launcher runs under ``watchdog`` as the leader of its own process group: stopping signals
the group (SIGTERM, then SIGKILL after a grace), so no rank outlives the gateway.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import httpx

from gateway.engines.distributed.launch import OFFLINE_ENV, ClusterSpec, free_ports, hostfile_json
from gateway.engines.distributed.launch import launch_command as build_command

log = logging.getLogger(__name__)
ClusterState = Literal["starting", "ready", "restarting", "failed", "stopped"]
PROBE_INTERVAL_SECONDS = 0.25
LOG_TAIL_BYTES = 4000
LAUNCH_MARK = "=== launch "


@dataclass(frozen=True)
class RestartPolicy:
    start_timeout: float = 600.0  # launch until rank 0's first token
    max_restarts: int = 5  # failures within the window before giving up
    restart_window: float = 600.0
    backoff_initial: float = 1.0  # doubled per consecutive failure
    backoff_max: float = 30.0
    stop_grace: float = 10.0  # SIGTERM to SIGKILL
    liveness_interval: float = 15.0  # between one-token probes of a ready cluster (0: none)
    liveness_timeout: float = 30.0  # a probe's token must come within this
    liveness_failures: int = 2  # probes in a row without a token: the cluster hangs


StateListener = Callable[[ClusterState, str | None], None]


class ClusterSupervisor:
    """One cluster's process group and its state (owned by one task)."""

    def __init__(
        self,
        name: str,
        spec: ClusterSpec,
        workdir: Path,
        policy: RestartPolicy = RestartPolicy(),
        http_port: int | None = None,
        listener: StateListener | None = None,
    ) -> None:
        self.name = name
        self.spec = spec
        self.policy = policy
        self.port = http_port or free_ports(1)
        self.workdir = workdir
        self.log_path = workdir / f"{name}.log"
        self.state: ClusterState = "starting"
        self.reason: str | None = None
        self.restarts = 0
        self.pid: int | None = None
        self.in_flight = 0  # the tier's requests now running on the cluster
        self._listener = listener
        self._failures: deque[float] = deque()
        self._ready = asyncio.Event()
        self._changed = asyncio.Event()
        self._process: asyncio.subprocess.Process | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> None:
        """Launch in the background; ``wait_ready`` tells when rank 0 answers."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._set("starting", None)
        self._task = asyncio.create_task(self._supervise(), name=f"cluster-{self.name}")

    async def wait_ready(self, timeout: float) -> bool:
        """True once ready; False if it is not within ``timeout`` or has failed for good."""
        deadline = time.monotonic() + timeout
        while self.state != "ready":
            if self.state in ("failed", "stopped"):
                return False
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), left)
        return True

    async def stop(self) -> None:
        self._stopping = True
        await self._end_group()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._set("stopped", None)

    def describe(self) -> dict[str, object]:
        return {
            "state": self.state,
            "ranks": self.spec.ranks,
            "hosts": [h.ssh for h in self.spec.hosts],
            "backend": self.spec.backend,
            "sharding": self.spec.sharding,
            "rank0_url": self.base_url,
            "restarts": self.restarts,
            "pid": self.pid,
            "log": str(self.log_path),
        }

    def log_tail(self) -> str:
        try:
            with self.log_path.open("rb") as handle:
                handle.seek(max(0, self.log_path.stat().st_size - LOG_TAIL_BYTES))
                return handle.read().decode(errors="replace")
        except OSError:
            return ""

    def _set(self, state: ClusterState, reason: str | None) -> None:
        self.state, self.reason = state, reason
        if state == "ready":
            self._ready.set()
        else:
            self._ready.clear()
        self._changed.set()
        if self._listener is not None:
            self._listener(state, reason)

    async def _supervise(self) -> None:
        while not self._stopping:
            reason = await self._run_once()
            if self._stopping:
                return
            now = time.monotonic()
            self._failures.append(now)
            while self._failures and now - self._failures[0] > self.policy.restart_window:
                self._failures.popleft()
            if len(self._failures) > self.policy.max_restarts:
                log.error("cluster %s: giving up: %s", self.name, reason)
                self._set("failed", reason)
                return
            delay = min(
                self.policy.backoff_max,
                self.policy.backoff_initial * 2 ** (len(self._failures) - 1),
            )
            log.warning("cluster %s: %s; restarting in %.1f s", self.name, reason, delay)
            self.restarts += 1
            self._set("restarting", reason)
            await asyncio.sleep(delay)

    async def _run_once(self) -> str:
        """One launch: until it dies (or never became ready); returns why it ended."""
        process = await self._spawn()
        exited = asyncio.ensure_future(process.wait())
        probe = asyncio.ensure_future(self._probe_until_ready())
        try:
            done, _ = await asyncio.wait(
                {exited, probe},
                timeout=self.policy.start_timeout,
                return_when=asyncio.FIRST_COMPLETED,
            )
            if probe in done and probe.exception() is not None:
                return f"rank 0 failed its first answer: {probe.exception()!r}"
            if probe in done:
                log.info("cluster %s: ready at %s", self.name, self.base_url)
                self._set("ready", None)
                hung = asyncio.ensure_future(self._until_hung())
                try:
                    await asyncio.wait({exited, hung}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    hung.cancel()
                if not exited.done():
                    return await hung
                return f"it ended: {self._first_warning() or f'exit code {process.returncode}'}"
            if exited in done:
                return f"it ended before it was ready: {self._first_warning() or 'see its log'}"
            return f"rank 0 did not answer within {self.policy.start_timeout:.0f} s"
        finally:
            probe.cancel()
            await self._end_group()
            exited.cancel()

    async def _spawn(self) -> asyncio.subprocess.Process:
        hostfile = self.workdir / f"{self.name}.hosts.json"
        hostfile.write_text(hostfile_json(self.spec))
        ring_port = self.spec.starting_port or free_ports(self.spec.ranks)
        command = build_command(self.spec, hostfile, self.port, ring_port)
        watchdog = [sys.executable, "-m", "gateway.engines.distributed.watchdog", str(os.getpid())]
        with self.log_path.open("ab") as log_file:
            log_file.write(f"\n{LAUNCH_MARK}{time.ctime()}: {' '.join(command)}\n".encode())
            log_file.flush()
            # stdin: a pipe nobody writes to. mlx.launch forwards its stdin to every rank;
            # /dev/null would be read as an endless stream of empty chunks.
            self._process = await asyncio.create_subprocess_exec(
                *watchdog,
                "--",
                *command,
                stdin=asyncio.subprocess.PIPE,
                stdout=log_file,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
                env=self._environment(),
                cwd=tempfile.gettempdir(),
            )
        self.pid = self._process.pid
        log.info("cluster %s: launched (pid %d, %d ranks)", self.name, self.pid, self.spec.ranks)
        return self._process

    def _environment(self) -> dict[str, str]:
        env = dict(os.environ)  # local ranks inherit it; remote ones get --env
        env.update(OFFLINE_ENV)
        env.update(self.spec.env)
        return env

    async def _probe_until_ready(self) -> None:
        """Rank 0's /health, then a one-token completion: every rank loaded and connected."""
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{self.port}") as client:
            while True:
                try:
                    health = await client.get("/health", timeout=2.0)
                    if health.status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(PROBE_INTERVAL_SECONDS)
            answer = await client.post(
                "/v1/completions",
                json={"model": "default_model", "prompt": "ready", "max_tokens": 1},
                timeout=self.policy.start_timeout,
            )
            answer.raise_for_status()

    async def _until_hung(self) -> str:
        """Probe a ready cluster until ``liveness_failures`` probes in a row get no token
        within ``liveness_timeout``; returns why (never, without an interval)."""
        policy = self.policy
        if policy.liveness_interval <= 0:
            await asyncio.Event().wait()
        failures = 0
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{self.port}") as client:
            while True:
                await asyncio.sleep(policy.liveness_interval)
                if self.in_flight:
                    continue
                try:
                    answer = await client.post(
                        "/v1/completions",
                        json={"model": "default_model", "prompt": "alive", "max_tokens": 1},
                        timeout=policy.liveness_timeout,
                    )
                    answer.raise_for_status()
                    failures = 0
                    continue
                except httpx.HTTPError as exc:
                    failures += 1
                    problem = repr(exc)
                log.warning("cluster %s: liveness probe failed (%s)", self.name, problem)
                if failures >= policy.liveness_failures:
                    return (
                        f"rank 0 gave no token to {failures} probes in a row "
                        f"({policy.liveness_timeout:.0f} s each): a rank hangs ({problem})"
                    )

    async def _end_group(self) -> None:
        process = self._process
        if process is None or process.returncode is not None:
            self._signal_group(process, signal.SIGKILL)  # stragglers of a finished leader
            return
        self._signal_group(process, signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.wait(), self.policy.stop_grace)
        self._signal_group(process, signal.SIGKILL)
        await process.wait()

    @staticmethod
    def _signal_group(process: asyncio.subprocess.Process | None, sig: int) -> None:
        if process is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, sig)

    def _first_warning(self) -> str | None:
        """mlx.launch's own account of the rank that ended first in this launch (it then
        terminates the others, which it reports too)."""
        launch = self.log_tail().rpartition(LAUNCH_MARK)[2]
        lines = [line for line in launch.splitlines() if "[WARN]" in line]
        if not lines:
            return None
        return lines[0].replace("\x1b[33m", "").replace("\x1b[0m", "").strip()
