"""The GPU benchmarks of issue 22, run on the device machine in one call each.

``decode``: the H200's limits (``limits.py``), then per model, most needed first, ``gateway
bench ceiling`` (mlx-lm's ``generate_step``, the gateway plain / JSON schema / logprobs with
its threads' CPU per token, the previous version of the source as the baseline,
``mlx_lm.server``, a profiled run) until the time budget is spent.
``ttft``: ``gateway bench versus`` at 2K, 8K and 32K-token contexts (cold, hinted, hinted +
speculated, second turn) against ``mlx_lm.server``, per model, until the budget is spent.

Every benchmark runs as its own process with a timeout; one failing does not stop the others.
Everything lands in one JSON file and one log under OUT (the device tool brings back few
files). Usage: ``python ops/gpu/run.py PHASE OUT MODELS_DIR SMOLLM2 BEFORE_SRC BUDGET_S``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DECODE_MODELS = (
    "smollm2-bf16",
    "llama-1b-bf16",
    "llama-8b-bf16",
    "llama-1b-4bit",
    "smollm2-4bit",
    "llama-8b-4bit",
)
# (model, contexts): SmolLM2's own context is 8,192 tokens.
TTFT_MODELS: tuple[tuple[str, tuple[int, ...]], ...] = (
    ("llama-1b-bf16", (2048, 8192, 32768)),
    ("llama-8b-bf16", (2048, 8192, 32768)),
    ("smollm2-bf16", (2048,)),
)
# A model is started only when at least this much of the budget is left (seconds).
MIN_LEFT = {"smollm2": 60, "llama-1b": 75, "llama-8b": 150, "tiny": 30}
DECODE_TOKENS, RUNS, TTFT_RUNS = 200, 5, 5
RUNS = TTFT_RUNS = int(os.environ.get("GPU_RUNS", RUNS))  # fewer only for a smoke test


class Phase:
    def __init__(self, out: Path, budget: float) -> None:
        self.out = out
        self.deadline = time.monotonic() + budget
        self.log = (out / "log.txt").open("a")
        self.result: dict[str, Any] = {}

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def say(self, text: str) -> None:
        line = f"[{time.strftime('%H:%M:%S')} {self.left():5.0f}s left] {text}"
        print(line, flush=True)
        self.log.write(line + "\n")
        self.log.flush()

    def run(self, name: str, argv: list[str], timeout: float) -> bool:
        self.say(f"{name}: {' '.join(argv)}")
        started = time.monotonic()
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=max(timeout, 1))
        except subprocess.TimeoutExpired as stopped:
            self.log.write(str(stopped.stdout or "")[-4000:] + str(stopped.stderr or "")[-4000:])
            self.say(f"{name}: TIMED OUT after {timeout:.0f} s")
            return False
        self.log.write(done.stdout[-6000:] + "\n" + done.stderr[-6000:] + "\n")
        self.say(f"{name}: exit {done.returncode} in {time.monotonic() - started:.0f} s")
        if done.returncode == 0:
            print(_table_of(done.stdout), flush=True)
        else:
            print(done.stderr[-2500:], flush=True)
        return done.returncode == 0

    def save(self) -> None:
        (self.out / "results.json").write_text(json.dumps(self.result, indent=2))


def _table_of(stdout: str) -> str:
    """The benchmark's printed table (what comes before its JSON)."""
    return stdout.split("\n{", 1)[0][-3500:]


def build_models(phase: Phase, models: Path, smollm2: Path, names: list[str]) -> dict[str, Path]:
    folders: dict[str, Path] = {}
    for name in names:
        if phase.left() < 30:
            break
        argv = [sys.executable, str(HERE / "models.py"), str(models), str(smollm2), name]
        started = time.monotonic()
        done = subprocess.run(argv, capture_output=True, text=True, timeout=phase.left())
        if done.returncode != 0:
            phase.say(f"build {name} FAILED: {done.stderr[-1500:]}")
            continue
        folders[name] = Path(done.stdout.strip().split("\t")[-1])
        phase.say(f"model {name} ready ({time.monotonic() - started:.0f} s)")
    return folders


def chosen(default: tuple[str, ...]) -> list[str]:
    """The models to run: ``GPU_MODELS`` (comma-separated; ``tiny`` for a smoke test)."""
    wanted = os.environ.get("GPU_MODELS")
    return wanted.split(",") if wanted else list(default)


def decode(phase: Phase, models: Path, smollm2: Path, before: Path) -> None:
    sys.path.insert(0, str(HERE))
    from limits import model_limits  # (no MLX: it reads the folder's files)

    ceilings_json = phase.out / "ceilings.json"
    if phase.run("limits", [sys.executable, str(HERE / "limits.py"), str(ceilings_json)], 120):
        phase.result["limits"] = {"ceilings": json.loads(ceilings_json.read_text())["ceilings"]}
        phase.save()
    for name in chosen(DECODE_MODELS):
        needed = next(v for k, v in MIN_LEFT.items() if name.startswith(k))
        if phase.left() < needed:
            phase.say(f"{name}: skipped, {phase.left():.0f} s left")
            continue
        # Built just before its turn: an 8B build must not delay the smaller models' rows.
        folder = build_models(phase, models, smollm2, [name]).get(name)
        if folder is None:
            continue
        if "limits" in phase.result:
            limits = model_limits(folder, phase.result["limits"]["ceilings"])
            phase.result["limits"][name] = limits
        out = phase.out / f"ceiling-{name}.json"
        argv = [
            sys.executable, "-m", "gateway", "bench", "ceiling",
            "--model-folder", str(folder), "--baseline", str(before), "--versus-server",
            "--runs", str(RUNS), "--max-tokens", str(DECODE_TOKENS), "--json", str(out),
        ]  # fmt: skip
        if not name.startswith("llama-8b"):  # two more 16 GB loads would not fit the budget
            argv += ["--profile-dir", str(models.parent / "profiles" / name)]
        if phase.run(f"ceiling {name}", argv, phase.left() - 10) and out.exists():
            phase.result[f"ceiling/{name}"] = json.loads(out.read_text())
            out.unlink()
            phase.save()


def ttft(phase: Phase, models: Path, smollm2: Path) -> None:
    contexts_of = dict(TTFT_MODELS)
    for name in chosen(tuple(contexts_of)):
        contexts = contexts_of.get(name, (2048,))
        needed = 2 * next(v for k, v in MIN_LEFT.items() if name.startswith(k))
        if phase.left() < needed:
            phase.say(f"{name}: skipped, {phase.left():.0f} s left")
            continue
        folders = build_models(phase, models, smollm2, [name])
        if name not in folders:
            continue
        out = phase.out / f"versus-{name}.json"
        argv = [
            sys.executable, "-m", "gateway", "bench", "versus",
            "--model-folder", str(folders[name]), "--context-tokens", *map(str, contexts),
            "--runs", str(TTFT_RUNS), "--max-tokens", "64", "--json", str(out),
        ]  # fmt: skip
        if phase.run(f"versus {name}", argv, phase.left() - 10) and out.exists():
            phase.result[f"versus/{name}"] = json.loads(out.read_text())
            out.unlink()
            phase.save()


def main(argv: list[str]) -> int:
    which, out, models, smollm2, before, budget = argv
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    phase = Phase(Path(out), float(budget))
    phase.say(f"phase {which}")
    try:
        if which == "decode":
            decode(phase, Path(models), Path(smollm2), Path(before))
        else:
            ttft(phase, Path(models), Path(smollm2))
    finally:
        phase.save()
        phase.say("done")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
