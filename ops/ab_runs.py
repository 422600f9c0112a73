"""What the in-process A/B scripts of ops/ share: the model folder they run, the runs
alternating between two ways (which goes first swapped each run, one discarded warm-up of
each) and the report (a table, the load average beside it, the raw JSON)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


def model_folder(given: str | None) -> Path:
    """``--model-folder``'s folder, or the embedded model's."""
    from gateway.config import default_cache_dir
    from gateway.modelstore.store import DEFAULT_MODEL_ID, ModelStore

    return Path(given) if given else ModelStore(default_cache_dir()).path_for(DEFAULT_MODEL_ID)


def alternating(
    ways: tuple[str, str], runs: int, once: Callable[[str], tuple[float, Any]]
) -> tuple[dict[str, list[float]], dict[str, list[Any]]]:
    """``once(way)`` -> (a figure, its output) for each way, ``runs`` + 1 times, the order
    swapped run by run; the figures without each way's first (the warm-up), every output."""
    figures: dict[str, list[float]] = {way: [] for way in ways}
    outputs: dict[str, list[Any]] = {way: [] for way in ways}
    for index in range(runs + 1):
        for way in ways if index % 2 == 0 else ways[::-1]:
            figure, output = once(way)
            outputs[way].append(output)
            if index:
                figures[way].append(figure)
    return figures, outputs


def report(
    path: str | None, table_rows: Sequence[Any], load: tuple[float, ...], **fields: Any
) -> None:
    """Print ``table_rows`` (bench.stats.table's) with the load average at the start and now, and
    write ``fields`` with both as JSON to ``path``."""
    from bench.stats import table, write_json

    load_after = os.getloadavg()
    print(table(table_rows))
    print(f"load average at the start {load}, at the end {load_after}")
    write_json(path, {**fields, "load_average": {"start": load, "end": load_after}})
