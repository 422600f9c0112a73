"""The one benchmark method: a discarded warm-up, N measured runs, min/median/max, ratios."""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Summary:
    min: float
    median: float
    max: float
    runs: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Summary:
        return cls(min(values), statistics.median(values), max(values), len(values))

    def as_dict(self) -> dict[str, float]:
        return {"min": self.min, "median": self.median, "max": self.max, "runs": self.runs}


def ratio(numerator: Summary, denominator: Summary) -> float:
    """Ratio of medians."""
    return numerator.median / denominator.median if denominator.median else float("inf")


def table(rows: Sequence[tuple[str, str, Summary]], unit_width: int = 10) -> str:
    """Rows of (metric, variant, summary) as an aligned text table."""
    head = f"{'metric':34} {'variant':22} {'min':>{unit_width}} {'median':>{unit_width}} {'max':>{unit_width}}"
    lines = [head, "-" * len(head)]
    for metric, variant, s in rows:
        lines.append(
            f"{metric:34} {variant:22} {s.min:>{unit_width}.4g} {s.median:>{unit_width}.4g} "
            f"{s.max:>{unit_width}.4g}"
        )
    return "\n".join(lines)


def write_json(path: str | None, result: dict[str, Any]) -> None:
    text = json.dumps(result, indent=2)
    if path:
        Path(path).write_text(text + "\n")
    print(text)
