"""``gateway bench``: measurements with one method (see ``bench.stats``)."""

from __future__ import annotations

import argparse
import importlib

BENCHMARKS = {
    "ceiling": (
        "decode tokens/s (mlx-lm; the gateway plain, constrained, with logprobs) as a fraction "
        "of weights bytes / measured matrix-vector bandwidth, and a decode step's profile"
    ),
    "chat": "gateway over HTTP vs raw mlx-lm: time to first token, decode tokens/s, memory",
    "restart": "time to first token after a restart (prefix cache from disk) vs a warm hit",
    "peers": "20 requests on one node (1 core) vs two peered nodes (1 core each): throughput",
    "oversized": "a normal request's latency, idle vs 8 clients posting oversized conversations",
    "priority": "a user request's time to first token, idle vs 4 background generations",
    "stages": (
        "the engine's passes whole (decode queued ahead) vs in groups of layers of ~10/5/1 ms: "
        "decode and prefill tokens/s, the time between points where a user could preempt"
    ),
    "typing": "time to first token cold vs after a ready typing hint (1,500+ token context)",
    "task-hint": "a background task's latency sent right after its typing hint vs without one",
    "opening": "a Responses stream's first event by prompt length, with and without 20 tools",
    "structured": "decode tokens/s with constrained decoding (llguidance) vs without",
    "speculative": (
        "decode tokens/s with speculation off, prompt lookup and a draft model: an edit, a JSON "
        "extraction, free chat; same text in every mode"
    ),
    "embeddings": "POST /v1/embeddings inputs/s for batches of 1, 8 and 32 short texts",
    "concurrency": (
        "N = 1, 2, 4, 8 concurrent clients (greedy, a prompt each), the gateway vs mlx_lm.server: "
        "aggregate tokens/s, TTFT, the largest batch seen, texts unlike alone"
    ),
    "versus": "the gateway vs mlx_lm.server: cold, multi-turn and hinted TTFT, decode tokens/s",
    "upstream": "an OpenAI-upstream tier vs the same mlx_lm.server called directly",
    "distributed": (
        "one process vs two mlx.launch ranks on loopback (pipeline, tensor) as gateway tiers: "
        "TTFT, decode tokens/s, same greedy text, an idle cluster's CPU"
    ),
    "models": "a 1B-shape 4-bit qwen3 from the HF cache: load, peak RSS, decode, float32 vs 4-bit",
    "experts": (
        "a 1.7B synthetic MoE streamed from disk (LRU, LFU; cold and warm page cache) vs fully "
        "resident: decode tokens/s, TTFT, peak RSS, hit ratio, same greedy text"
    ),
}


def add_bench_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("benchmark", choices=sorted(BENCHMARKS), nargs="?", default="chat")
    parser.add_argument("--runs", type=int, default=5, help="measured runs (after one warm-up)")
    parser.add_argument("--max-tokens", type=int, default=64, help="tokens to generate per run")
    parser.add_argument("--json", help="also write the JSON result to this file")
    parser.add_argument(
        "--baseline",
        help="chat, ceiling, priority, task-hint, opening: the source folder of another version of the "
        "gateway (a git worktree of an earlier commit), served alongside this one in the same "
        "runs, for before/after",
    )
    parser.add_argument(
        "--model-folder",
        help="ceiling, versus, concurrency, distributed, priority, speculative, structured: an mlx-lm model folder to measure instead of the embedded "
        "default (served under the default model's id)",
    )
    parser.add_argument(
        "--versus-server",
        action="store_true",
        help="ceiling: also mlx_lm.server on the same weights, streamed the same way",
    )
    parser.add_argument(
        "--profile-dir",
        help="ceiling, concurrency: one more gateway run (concurrency: round) under the "
        "per-thread profiler, written here",
    )
    parser.add_argument(
        "--trace-dir",
        help="concurrency: one more round of the most clients with the slot's turn trace "
        "(gateway.scheduler.turn_trace), written here and summarized in the result; "
        "priority: the gateway's turns traced throughout",
    )
    parser.add_argument(
        "--rows",
        nargs="*",
        help="ceiling: only these of the gateway's rows (plain, 'json schema', 'logprobs 5')",
    )
    parser.add_argument(
        "--variant",
        action="append",
        metavar="NAME:KEY=VALUE[,KEY=VALUE]",
        help="ceiling: one more gateway of this source, with settings changed, KEY a dotted "
        "path (unpaced:scheduler.token_flush_seconds=0, eager:tiers.default.decode_step=eager), "
        "in the same runs",
    )
    parser.add_argument(
        "--engine-row",
        action="store_true",
        help="ceiling: also the gateway's engine in this process (MLXRunner.generate, no HTTP)",
    )
    parser.add_argument(
        "--slots", type=int, help="experts: expert slots per MoE layer (default 7 of 64)"
    )
    parser.add_argument(
        "--draft-model",
        help="speculative: a draft model reference (shares the target's tokenizer) for a row",
    )
    parser.add_argument(
        "--tasks",
        nargs="*",
        choices=["edit", "json", "chat"],
        help="speculative: only these tasks (default: all three)",
    )
    parser.add_argument(
        "--context-tokens",
        type=int,
        nargs="*",
        help="versus: the contexts' sizes in tokens (default: one of ~1,600)",
    )
    parser.add_argument(
        "--clients",
        type=int,
        nargs="*",
        help="concurrency: the numbers of concurrent clients (default: 1 2 4 8)",
    )


# A benchmark whose module has another name (``typing`` would read as the standard library's).
MODULES = {"typing": "hints", "task-hint": "task_hint"}


def benchmark_module(name: str) -> str:
    return f"bench.{MODULES.get(name, name)}"


def run_bench(args: argparse.Namespace) -> int:
    if args.runs < 5:
        print("note: fewer than 5 runs is below this project's benchmark method")
    module = importlib.import_module(benchmark_module(args.benchmark))
    return int(module.main(args))
