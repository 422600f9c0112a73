"""Points to pause at inside a pass: a pass computed a group of layers at a time.

Shared by the decode loop (``gateway.engines.mlx_decode``), the batch's steps
(``gateway.engines.batch_decode``) and the runner's prefill chunks.
"""

from __future__ import annotations

import time
from collections.abc import Generator

import mlx.core as mx

from gateway.engines.runner import KVCache
from gateway.scheduler.pacing import PASS_POINT, PassPoint


def pass_points(cache: KVCache, stages: int) -> Generator[PassPoint, None, float]:
    """Compute the pass just built into ``cache`` in ``stages`` groups of layers (about the
    scheduler's pause grain each, ``PassTiming.stages``), yielding ``PASS_POINT`` after
    each group but the last: points where the job may be paused with the rest of the pass
    still lazy (``Pacing.pause_grain``). Returns the seconds spent suspended there.

    A group ends at a layer's cache: its keys and values need every layer below it, and
    nothing above. They are taken now, as a paused job's cache may be replaced."""
    stages = min(stages, len(cache))
    ends = [cache[len(cache) * k // stages].state for k in range(1, stages)]
    suspended = 0.0
    for arrays in ends:
        mx.eval(arrays)
        point = time.perf_counter()
        yield PASS_POINT
        suspended += time.perf_counter() - point
    return suspended
