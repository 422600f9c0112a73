"""The GPU benchmarks of issue 22, run on the device machine in one call each.

``decode``: the H200's limits (``limits.py``), then SmolLM2 and the Llama-1B shape in bf16,
``gateway bench ceiling`` (mlx-lm's ``generate_step``, the gateway's engine in process, the
gateway streamed with its threads' CPU per token, the same source with tokens handed over
one by one, the previous version of the source as the baseline, ``mlx_lm.server``, a
profiled run). ``more``: the 4-bit rows and the Llama-8B TTFT rows (``gateway bench
versus`` at 2K and 8K: cold, hinted, hinted + speculated, second turn, against
``mlx_lm.server``). ``long``: the 8B's 32K row. ``priority``: ``gateway bench priority`` (issue 23) on SmolLM2
and the Llama-1B shape, and ``gateway bench stages`` on the latter. ``speculative``: ``gateway bench
speculative`` (issue 34). ``concurrency``: ``gateway bench concurrency`` (issue 33: 1 to 8 concurrent
clients vs ``mlx_lm.server``), then ``bench priority`` beside batched background work. ``real``:
issues 31 and 34 on the real Qwen2.5-Coder GGUFs (``models.py``). ``compiled``: the compiled
decode step against the eager one (issue 32); ``essential``: its first rows, short. Each until
the time budget is spent (``PLAN``).

Every benchmark runs as its own process with a timeout; one failing does not stop the others.
Everything lands in one JSON file and one log under OUT (the device tool brings back few
files). Usage: ``python ops/gpu/run.py PHASE OUT MODELS_DIR SMOLLM2 BEFORE_SRC BUDGET_S``;
``GPU_SMOKE=1`` runs the first ceiling and versus steps on a tiny model (a CPU dry run); for
``concurrency``, its own steps on the tiny model.
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
# The gateway rows are compared with the same source under another setting (``--variant``).
UNPACED = "unpaced:scheduler.token_flush_seconds=0"
EAGER = "eager:tiers.default.decode_step=eager"  # the decode step built anew each step
# Each phase: (kind, model, arguments) in order, most needed first; a step starts only when
# MIN_LEFT of the budget is left for it. ``ceiling``: decode; ``versus``: TTFT.
PLAN: dict[str, list[tuple[str, str, list[str]]]] = {
    "decode": [
        ("ceiling", "smollm2-bf16", ["--runs", "9", "--max-tokens", "512", "--rows", "plain",
                                     "--baseline", "{before}", "--variant", UNPACED,
                                     "--engine-row", "--versus-server", "--profile-dir", "{profiles}"]),
        ("ceiling", "llama-1b-bf16", ["--runs", "9", "--max-tokens", "512", "--rows", "plain",
                                      "--baseline", "{before}", "--variant", UNPACED,
                                      "--engine-row", "--versus-server", "--profile-dir", "{profiles}"]),
    ],
    "more": [
        ("ceiling", "llama-1b-4bit", ["--runs", "5", "--max-tokens", "256", "--rows", "plain",
                                      "--engine-row", "--versus-server"]),
        ("ceiling", "llama-8b-4bit", ["--runs", "5", "--max-tokens", "256", "--rows", "plain",
                                      "--versus-server"]),
        ("versus", "llama-8b-bf16", ["--context-tokens", "2048", "8192", "--runs", "5"]),
        ("ceiling", "smollm2-4bit", ["--runs", "5", "--max-tokens", "256", "--rows", "plain",
                                     "--engine-row", "--versus-server"]),
    ],
    "long": [
        ("versus", "llama-8b-bf16", ["--context-tokens", "32768", "--runs", "5"]),
    ],
    # Issue 23 item 4 at a Mac's speed: the user's TTFT idle vs behind background decode and
    # behind background prefill (a CPU decode step is ~40% of its idle TTFT; here a few %).
    "priority": [
        ("priority", "llama-1b-bf16", ["--runs", "10", "--baseline", "{before}"]),
        ("priority", "smollm2-bf16", ["--runs", "10", "--baseline", "{before}"]),
        # What computing a pass in groups of layers costs there (the grains' bounds).
        ("stages", "llama-1b-bf16", ["--runs", "5"]),
    ],
    # Issue 34: speculative decoding. The real SmolLM2 (bf16) on the three tasks, off vs
    # prompt lookup; the Llama-1B shape with itself as its draft (every guess right: the
    # upper bound) and with SmolLM2 as its draft (same tokenizer, other weights: nearly every
    # guess wrong, the adaptive floor), free chat.
    "speculative": [
        ("speculative", "smollm2-bf16", ["--runs", "5", "--max-tokens", "256"]),
        ("speculative", "llama-1b-bf16", ["--runs", "5", "--max-tokens", "128", "--tasks", "chat",
                                          "--draft-model", "{model:llama-1b-bf16}"]),
        ("speculative", "llama-1b-bf16", ["--runs", "5", "--max-tokens", "128", "--tasks", "chat",
                                          "--draft-model", "{model:smollm2-bf16}"]),
    ],
    # Issue 33: batched decode. 1, 4 and 8 concurrent greedy clients (what it asks), the gateway vs
    # mlx_lm.server on the Llama-1B shape (bf16), as in the H200 table; then, if
    # time is left, the user's TTFT and decode speed beside 4 batched background sequences.
    "concurrency": [
        ("concurrency", "llama-1b-bf16", ["--runs", "5", "--clients", "1", "4", "8",
                                          "--max-tokens", "128"]),
        ("priority", "llama-1b-bf16", ["--runs", "5"]),
    ],
    # Where a batch's time goes on the device: 1 and 8 clients, then 8 with the slot's turn
    # trace and 8 under the per-thread profiler (their summaries in the JSON).
    "batch-profile": [
        ("concurrency", "llama-1b-bf16", ["--runs", "2", "--clients", "1", "8",
                                          "--max-tokens", "128", "--profile-dir", "{profiles}",
                                          "--trace-dir", "{traces}"]),
        # The user's TTFT beside 4 batched background sequences, every turn traced.
        ("priority", "llama-1b-bf16", ["--runs", "5", "--trace-dir", "{traces}"]),
    ],
    # Session 10's second call, after the sequences' sync-free leaving (issue 33) and the
    # draft caches kept between requests (issue 34): the concurrency table (with a traced
    # round), the user's TTFT beside 4 batched background sequences (traced), then the
    # draft-model floor (SmolLM2 drafting for the 1B shape) and its own draft, chat and edit.
    "final": [
        ("concurrency", "llama-1b-bf16", ["--runs", "5", "--clients", "1", "4", "8",
                                          "--max-tokens", "128", "--trace-dir", "{traces}"]),
        ("priority", "llama-1b-bf16", ["--runs", "5", "--trace-dir", "{traces}"]),
        ("speculative", "llama-1b-bf16", ["--runs", "5", "--max-tokens", "128", "--tasks", "chat",
                                          "edit", "--draft-model", "{model:smollm2-bf16}"]),
        ("speculative", "llama-1b-bf16", ["--runs", "5", "--max-tokens", "128", "--tasks", "chat",
                                          "edit", "--draft-model", "{model:llama-1b-bf16}"]),
    ],
    # Issues 31 and 34 on real weights (the Qwen2.5-Coder GGUFs, imported here as a user's
    # would be): the 1.5B against mlx_lm.server (cold, second turn, hinted, hinted +
    # speculated, decode), the real draft/target pair 0.5B -> 1.5B on the three tasks (off,
    # prompt lookup, draft model), the 1.5B as its own draft (the upper bound: every guess
    # the model's own), then decode plain and under a JSON schema vs mlx_lm.server.
    "real": [
        ("versus", "qwen-1.5b", ["--runs", "5"]),
        ("speculative", "qwen-1.5b", ["--runs", "9", "--max-tokens", "256",
                                      "--draft-model", "{model:qwen-0.5b}"]),
        ("speculative", "qwen-1.5b", ["--runs", "9", "--max-tokens", "128", "--tasks", "chat",
                                      "edit", "--draft-model", "{model:qwen-1.5b}"]),
        ("ceiling", "qwen-1.5b", ["--runs", "5", "--max-tokens", "256", "--rows", "plain",
                                  "json schema", "--engine-row", "--versus-server"]),
    ],
    # Session 11's compiled decode step (issues 32 and 33), against the eager step in the same
    # runs: in process for 1, 4 and 8 sequences (``ops/compiled_step_ab.py``), then served
    # (``--variant``): decode plain and under a JSON schema on the Llama-1B shape (the issue's
    # ≥ 1.3x generate_step, ≥ 0.95x plain), the concurrency table (batched steps compiled),
    # (the 8B's TTFT rows: ``ttft``).
    "compiled": [
        ("compiled_step_ab.py", "llama-1b-bf16", ["--sequences", "1", "4", "8", "--runs", "5",
                                                  "--max-tokens", "128"]),
        ("ceiling", "llama-1b-bf16", ["--runs", "5", "--max-tokens", "256", "--rows", "plain",
                                      "json schema", "--variant", EAGER, "--engine-row",
                                      "--versus-server"]),
        ("ceiling", "smollm2-bf16", ["--runs", "5", "--max-tokens", "256", "--rows", "plain",
                                     "--variant", EAGER]),
        ("concurrency", "llama-1b-bf16", ["--runs", "5", "--clients", "1", "4", "8",
                                          "--max-tokens", "128"]),
    ],
    # The rows the issues ask for first, where little device time is left (a lean payload:
    # no SmolLM2 weights): decode plain and under a JSON schema, compiled vs eager, beside
    # generate_step, then the in-process A/B for 1 and 8 sequences.
    "essential": [
        ("ceiling", "llama-1b-bf16", ["--runs", "5", "--max-tokens", "256", "--rows", "plain",
                                      "json schema", "--variant", EAGER]),
        ("compiled_step_ab.py", "llama-1b-bf16", ["--sequences", "1", "8", "--runs", "5",
                                                  "--max-tokens", "128"]),
    ],
    # Issue 32's table on the 8B shape (bf16), a call of its own (the build alone takes
    # minutes): gateway vs mlx_lm.server at 2K and 8K, then 32K apart (a failure there must
    # not lose the shorter rows).
    "ttft": [
        ("versus", "llama-8b-bf16", ["--context-tokens", "2048", "8192", "--runs", "5"]),
        ("versus", "llama-8b-bf16", ["--context-tokens", "32768", "--runs", "3"]),
    ],
}  # fmt: skip
# A step is started only when at least this much of the budget is left (seconds).
MIN_LEFT = {"smollm2": 60, "llama-1b": 75, "llama-8b": 150, "qwen": 90, "tiny": 20}
SMOKE = os.environ.get("GPU_SMOKE")  # a CPU dry run: tiny model, 1 run, few tokens


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


def steps_of(phase: str) -> list[tuple[str, str, list[str]]]:
    if not SMOKE:
        return PLAN[phase]
    small = ["--runs", "1", "--max-tokens", "8"]
    if phase == "concurrency":  # the phase's own steps, shrunk to the tiny model
        return [
            ("concurrency", "tiny", ["--clients", "1", "2", *small]),
            ("priority", "tiny", small),
        ]
    first = PLAN["decode"][0][2]
    return [
        ("ceiling", "tiny", [*first[first.index("--rows") :], *small]),
        ("versus", "tiny", ["--context-tokens", "256", "--runs", "1"]),
    ]


def run_phase(phase: Phase, which: str, models: Path, smollm2: Path, before: Path) -> None:
    sys.path.insert(0, str(HERE))
    from limits import model_limits  # (no MLX: it reads the folder's files)

    if which == "decode":
        ceilings_json = phase.out / "ceilings.json"
        if phase.run("limits", [sys.executable, str(HERE / "limits.py"), str(ceilings_json)], 120):
            phase.result["limits"] = {"ceilings": json.loads(ceilings_json.read_text())["ceilings"]}
            phase.save()
    for index, (kind, name, args) in enumerate(steps_of(which)):
        needed = next(v for k, v in MIN_LEFT.items() if name.startswith(k))
        if phase.left() < needed:
            phase.say(f"{kind} {name}: skipped, {phase.left():.0f} s left")
            continue
        # Built just before its turn: an 8B build must not delay the smaller models' rows.
        folder = build_models(phase, models, smollm2, [name]).get(name)
        if folder is None:
            continue
        if "limits" in phase.result:
            phase.result["limits"][name] = model_limits(folder, phase.result["limits"]["ceilings"])
        out = phase.out / f"{kind}-{index}.json"
        places = {
            "{before}": str(before),
            "{profiles}": str(models.parent / "profiles" / name),
            "{traces}": str(models.parent / "traces" / name),
        }
        for arg in args:  # another model the step names ("{model:NAME}"), built here too
            if arg.startswith("{model:"):
                other = arg[len("{model:") : -1]
                places[arg] = str(build_models(phase, models, smollm2, [other]).get(other))
        # A benchmark of ``gateway bench``, or a script of ops/ (``compiled_step_ab.py``).
        command = (
            [str(HERE.parent / kind)] if kind.endswith(".py") else ["-m", "gateway", "bench", kind]
        )
        argv = [sys.executable, *command, "--model-folder", str(folder),
                *(places.get(arg, arg) for arg in args), "--json", str(out)]  # fmt: skip
        if phase.run(f"{kind} {name}", argv, phase.left() - 10) and out.exists():
            phase.result[f"{kind}/{name}/{index}"] = json.loads(out.read_text())
            out.unlink()
            phase.save()


def main(argv: list[str]) -> int:
    which, out, models, smollm2, before, budget = argv
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    phase = Phase(Path(out), float(budget))
    phase.say(f"phase {which}")
    try:
        run_phase(phase, which, Path(models), Path(smollm2), Path(before))
    finally:
        phase.save()
        phase.say("done")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
