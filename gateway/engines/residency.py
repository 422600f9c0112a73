"""Which local models are in memory: loaded on first use, unloaded when idle, within a budget.

Ollama's model: a model loads on its first request and stays ``keep_alive_seconds`` after
its last one. A load runs *in the one inference slot* (as a job of the requester's class),
because reading gigabytes of weights competes for the same memory bandwidth as decoding.
``memory_budget_bytes`` bounds the sum of loaded models: a model that does not fit first
unloads the least recently used idle ones; while the others are busy it waits for them to
become idle; a model larger than the whole budget is refused with a 503 naming the budget.

Decisions are taken on the event loop (who is loaded, who is in use); the loading and the
freeing of weights run on the inference thread, where every runner is created and used.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from gateway.engines.experts.stats import ExpertStats
from gateway.engines.runner import ModelRunner
from gateway.engines.weights import WeightsChoice
from gateway.errors import ServiceUnavailableError
from gateway.metrics import ResidencyMetrics
from gateway.scheduler.jobs import JobKind, JobSpec
from gateway.scheduler.slot import Scheduler
from gateway.seam.backend import Priority

log = logging.getLogger(__name__)

RunnerLoader = Callable[[], ModelRunner]  # called on the inference thread
# Bytes the framework holds: {"active": now, "peak": highest since it was reset}.
MemoryProbe = Callable[[], dict[str, int]]
KEEP_ALIVE_CHECK_SECONDS = 1.0


@dataclass(eq=False)
class Resident:
    """One local tier's model and its place in memory."""

    tier: str
    model_id: str
    load: RunnerLoader
    estimated_bytes: int
    keep_alive_seconds: float  # 0: never unloaded for idleness
    weights: WeightsChoice | None = None  # the form its weights take (None: not planned)
    expert_stats: ExpertStats | None = None  # experts streamed: hits, misses, reads
    # Speculative decoding: "lookup", "off" or "draft_model <reference>" (for /health).
    speculation: str | None = None
    runner: ModelRunner | None = None
    loaded_bytes: int = 0  # measured at load time
    in_use: int = 0  # requests holding the runner (queued, running or paused)
    last_used: float = field(default_factory=time.monotonic)
    loading: asyncio.Future[ModelRunner] | None = None
    on_unload: list[Callable[[], None]] = field(default_factory=list)

    @property
    def state(self) -> str:
        if self.runner is not None:
            return "loaded"
        return "loading" if self.loading is not None else "unloaded"

    @property
    def bytes(self) -> int:
        """Bytes it holds or is about to hold."""
        if self.runner is not None:
            return self.loaded_bytes
        return self.estimated_bytes if self.loading is not None else 0


class LocalModels:
    """Owns the loaded runners of every local tier; they all share the one slot."""

    def __init__(
        self,
        scheduler: Scheduler,
        metrics: ResidencyMetrics,
        budget_bytes: int,
        memory_probe: MemoryProbe,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.scheduler = scheduler
        self.metrics = metrics
        self.budget_bytes = budget_bytes
        self.memory_probe = memory_probe
        self.clock = clock
        self.residents: list[Resident] = []
        self._idle = asyncio.Condition()
        self._keep_alive_task: asyncio.Task[None] | None = None

    def register(self, resident: Resident) -> Resident:
        self.residents.append(resident)
        self.metrics.model_loaded_bytes.labels(resident.tier).set(0)
        return resident

    async def start(self) -> None:
        self._keep_alive_task = asyncio.create_task(self._unload_idle(), name="keep-alive")

    async def stop(self) -> None:
        if self._keep_alive_task is not None:
            self._keep_alive_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._keep_alive_task

    # -- using a model -------------------------------------------------------------------------

    async def acquire(self, resident: Resident, priority: Priority = Priority.USER) -> ModelRunner:
        """The resident's runner, loading it first if needed; pair with ``release``."""
        resident.in_use += 1
        try:
            while True:
                if resident.runner is not None:
                    return resident.runner
                if resident.loading is None:
                    if not await self._make_room(resident):
                        continue  # someone else loaded it while we waited for room
                    resident.loading = asyncio.get_running_loop().create_future()
                    self._submit_load(resident, priority)
                await asyncio.shield(resident.loading)
        except BaseException:
            self.release(resident)
            raise

    def release(self, resident: Resident) -> None:
        resident.in_use -= 1
        resident.last_used = self.clock()
        if resident.in_use == 0:
            asyncio.get_running_loop().create_task(self._notify_idle())

    async def _notify_idle(self) -> None:
        async with self._idle:
            self._idle.notify_all()

    # -- loading and unloading ---------------------------------------------------------------

    async def _make_room(self, resident: Resident) -> bool:
        """Unload idle models until ``resident`` fits; wait while the others are busy.

        Returns False if another request started loading ``resident`` meanwhile.
        """
        need = resident.estimated_bytes
        if need > self.budget_bytes:
            raise ServiceUnavailableError(
                f"the model {resident.model_id!r} (tier {resident.tier!r}) needs about "
                f"{need / 2**20:.0f} MiB, more than memory_budget_bytes "
                f"({self.budget_bytes / 2**20:.0f} MiB); raise the budget or use a smaller model"
            )
        waited_since = self.clock()
        while True:
            others = [r for r in self.residents if r is not resident and r.bytes]
            used = sum(r.bytes for r in others)
            idle = sorted((r for r in others if r.in_use == 0 and r.runner), key=_lru_key)
            while used + need > self.budget_bytes and idle:
                victim = idle.pop(0)
                used -= victim.loaded_bytes
                self._unload(victim, "budget")
            if used + need <= self.budget_bytes:
                return True
            # Every other loaded model is in use: wait until one becomes idle.
            if self.clock() - waited_since > self.scheduler.config.max_queue_wait:
                raise ServiceUnavailableError(
                    f"waited too long for memory to load {resident.model_id!r} "
                    f"(memory_budget_bytes {self.budget_bytes / 2**20:.0f} MiB is in use)"
                )
            async with self._idle:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._idle.wait(), KEEP_ALIVE_CHECK_SECONDS)
            if resident.runner is not None or resident.loading is not None:
                return False

    def _submit_load(self, resident: Resident, priority: Priority) -> None:
        future = resident.loading
        assert future is not None

        def work() -> Iterator[tuple[ModelRunner, int, float]]:
            started = time.perf_counter()
            before = self.memory_probe()["active"]
            runner = resident.load()
            measured = self.memory_probe()["active"] - before
            yield runner, max(measured, 0), time.perf_counter() - started

        try:
            job = self.scheduler.submit(
                JobSpec(priority, work=work, kind=JobKind.LOAD, preemptible=False)
            )
        except BaseException as exc:
            resident.loading = None
            future.set_exception(exc)
            raise

        async def follow() -> None:
            try:
                async for runner, measured, seconds in job.events():
                    resident.runner = runner
                    resident.loaded_bytes = measured or resident.estimated_bytes
                    resident.last_used = self.clock()
                    self.metrics.model_loads.labels(resident.tier).inc()
                    self.metrics.model_load_seconds.labels(resident.tier).observe(seconds)
                    self.metrics.model_loaded_bytes.labels(resident.tier).set(resident.loaded_bytes)
                    log.info(
                        "tier %s: loaded %s in %.1f s (%.0f MiB)",
                        resident.tier,
                        resident.model_id,
                        seconds,
                        resident.loaded_bytes / 2**20,
                    )
                if resident.runner is None:
                    raise ServiceUnavailableError(f"loading {resident.model_id!r} was cancelled")
                future.set_result(resident.runner)
            except BaseException as exc:
                log.error("tier %s: loading %s failed: %s", resident.tier, resident.model_id, exc)
                future.set_exception(
                    exc
                    if isinstance(exc, ServiceUnavailableError)
                    else ServiceUnavailableError(f"could not load {resident.model_id!r}: {exc}")
                )
            finally:
                resident.loading = None

        asyncio.get_running_loop().create_task(follow(), name=f"load {resident.tier}")
        # A failed load nobody waits for any more must not be logged as "never retrieved".
        future.add_done_callback(lambda f: f.exception() if not f.cancelled() else None)

    def _unload(self, resident: Resident, reason: str) -> None:
        """Forget the runner now (nobody holds it); free its memory on the inference thread."""
        runner = resident.runner
        if runner is None or resident.in_use:
            return
        resident.runner = None
        resident.loaded_bytes = 0
        for hook in resident.on_unload:
            hook()
        self.metrics.model_unloads.labels(resident.tier, reason).inc()
        self.metrics.model_loaded_bytes.labels(resident.tier).set(0)
        log.info("tier %s: unloaded %s (%s)", resident.tier, resident.model_id, reason)
        self.scheduler.submit_to_engine_thread(runner.close)

    async def _unload_idle(self) -> None:
        while True:
            await asyncio.sleep(KEEP_ALIVE_CHECK_SECONDS)
            now = self.clock()
            for resident in self.residents:
                keep = resident.keep_alive_seconds
                if (
                    keep > 0
                    and resident.runner is not None
                    and resident.in_use == 0
                    and now - resident.last_used >= keep
                ):
                    self._unload(resident, "keep_alive")

    def unload_all(self) -> None:
        for resident in self.residents:
            self._unload(resident, "shutdown")

    def memory(self) -> dict[str, int]:
        return {
            "budget": self.budget_bytes,
            "loaded": sum(r.loaded_bytes for r in self.residents),
            # All the framework holds (weights and caches), now and at its highest.
            **self.memory_probe(),
        }


def _lru_key(resident: Resident) -> float:
    return resident.last_used
