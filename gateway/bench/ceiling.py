"""Decode as a fraction of this machine's ceiling, and where a decode step's time goes.

Decoding one token reads every weight once, so a decode step cannot be faster than the
weights' bytes divided by the memory bandwidth a matrix-vector product reaches. This measures
that bandwidth with MLX itself (float32 on a Linux CPU, the compute path's dtype on a Mac:
a large matrix times a vector), the bytes of the embedded model's weights as loaded, and then,
alternating in every run after one discarded warm-up:

* mlx-lm's own decode loop (``generate_step``) on the model, in this process;
* the gateway's decode as a client sees it (a streamed greedy chat over HTTP): plain, under a
  JSON schema (constrained decoding) and with ``top_logprobs``;
* the CPU the gateway's event-loop thread spends per streamed token (HTTP, SSE, the serving
  layers), read from Linux's per-thread schedstat: Python work per token, free of the noise
  that throughput carries;
* with ``--baseline SRC``, the same from another version of the gateway's source (a git
  worktree of an earlier commit), for a before/after in one run.

A profile of one decode step follows: the forward pass, the same weights' matrix-vector
products alone (the part the ceiling counts), the Python time to build the step's graph
(hidden behind the computation by mlx-lm's pipelining as long as it is shorter), the
vocabulary projection's share.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from gateway.bench.process import RunningGateway, start_gateway
from gateway.bench.stats import Summary, table, write_json
from gateway.bench.streaming import stream_chat
from gateway.modelstore.store import DEFAULT_MODEL_ID

MATRIX_ROWS, MATRIX_COLUMNS = 8192, 8192  # 256 MiB in float32: far beyond the caches
PROMPT = "Tell me a long story about a lighthouse keeper."
JSON_PROMPT = "List twenty animals with a sentence about each, as JSON."
ANIMALS = {
    "type": "object",
    "properties": {
        "animals": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "about": {"type": "string"}},
                "required": ["name", "about"],
            },
            "minItems": 20,
        }
    },
    "required": ["animals"],
}
# The gateway's rows: (name, prompt, extra request fields).
GATEWAY_ROWS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("plain", PROMPT, {}),
    (
        "json schema",
        JSON_PROMPT,
        {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "animals", "schema": ANIMALS},
            }
        },
    ),
    ("logprobs 5", PROMPT, {"logprobs": True, "top_logprobs": 5}),
)


def timed(work: Any, repeats: int) -> float:
    """Median seconds of ``work()`` over ``repeats`` calls, after one discarded call."""
    work()
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        work()
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds)


def matvec_bandwidth(runs: int, dtype: Any) -> list[float]:
    """Bytes per second of ``W @ x`` over a matrix far larger than the caches."""
    import mlx.core as mx

    matrix = mx.random.normal((MATRIX_ROWS, MATRIX_COLUMNS)).astype(dtype)
    vector = mx.random.normal((MATRIX_COLUMNS,)).astype(dtype)
    mx.eval(matrix, vector)
    nbytes = matrix.nbytes
    rates = []
    for index in range(runs + 1):
        started = time.perf_counter()
        for _ in range(10):
            mx.eval(matrix @ vector)
        seconds = (time.perf_counter() - started) / 10
        if index:
            rates.append(nbytes / seconds)
    return rates


def load_model(folder: Path) -> tuple[Any, Any, int]:
    """The model as the gateway computes with it, its tokenizer and its weights' bytes."""
    from mlx.utils import tree_flatten

    from gateway.engines.device import choose_compute_path
    from gateway.engines.weights import default_mode, load_model

    model, tokenizer, _ = load_model(folder, default_mode(choose_compute_path()))
    parameters: Any = tree_flatten(model.parameters())
    return model, tokenizer, sum(int(value.nbytes) for _, value in parameters)


def mlx_lm_decode(model: Any, tokenizer: Any, max_tokens: int) -> float:
    """Tokens/s of mlx-lm's ``generate_step`` (greedy), first token to last."""
    import mlx.core as mx
    from mlx_lm.generate import generate_step

    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": PROMPT}], add_generation_prompt=True
    )
    times = [
        time.perf_counter() for _ in generate_step(mx.array(prompt), model, max_tokens=max_tokens)
    ]
    return (len(times) - 1) / (times[-1] - times[0])


def gateway_decode(
    gateway: RunningGateway,
    client: httpx.Client,
    prompt: str,
    extra: dict[str, Any],
    max_tokens: int,
) -> tuple[float, float | None]:
    """Tokens/s a client sees from a streamed greedy chat (one chunk per token), and the
    microseconds of CPU the server's event-loop thread spent per token (HTTP, SSE, the
    serving layers: Python work per token that is not the model's), where Linux tells."""
    body = {
        "model": DEFAULT_MODEL_ID,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        **extra,
    }
    before = event_loop_cpu_ns(gateway)
    streamed = stream_chat(client, body)
    after = event_loop_cpu_ns(gateway)
    tokens = max(len(streamed.times), 1)
    cpu = (after - before) / tokens / 1e3 if before is not None and after is not None else None
    return streamed.decode, cpu


def event_loop_cpu_ns(gateway: RunningGateway) -> int | None:
    """CPU nanoseconds of the server's main thread (its event loop), from Linux's schedstat."""
    pid = gateway.process.pid
    try:
        return int(Path(f"/proc/{pid}/task/{pid}/schedstat").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def step_profile(model: Any) -> dict[str, float]:
    """Milliseconds of one decode step (100 tokens of context) and of its parts."""
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm.models.cache import make_prompt_cache

    cache = make_prompt_cache(model)
    mx.eval(model(mx.array(list(range(100, 200)))[None], cache=cache))
    token = mx.array([[42]])

    def rewind() -> None:  # keep the context at 100 tokens
        for layer in cache:
            layer.offset -= 1

    def forward() -> None:
        mx.eval(model(token, cache=cache))
        rewind()

    built: list[Any] = []

    def build_only() -> None:
        built.append(model(token, cache=cache))
        rewind()

    parameters: Any = tree_flatten(model.parameters())
    matrices = [value for _, value in parameters if value.ndim == 2]
    vectors = {m.shape[1]: mx.random.normal((1, m.shape[1])).astype(m.dtype) for m in matrices}
    mx.eval(list(vectors.values()))

    def matvecs() -> None:
        mx.eval([vectors[m.shape[1]] @ m.T for m in matrices])

    head = max(matrices, key=lambda m: m.size)  # the vocabulary projection (or embedding)

    def projection() -> None:
        mx.eval(vectors[head.shape[1]] @ head.T)

    profile = {
        "forward pass": timed(forward, 20),
        "matrix-vector products alone": timed(matvecs, 20),
        "vocabulary projection alone": timed(projection, 20),
        "graph building (Python)": timed(build_only, 20),
    }
    mx.eval(built)
    return {name: seconds * 1e3 for name, seconds in profile.items()}


def run(args: argparse.Namespace) -> dict[str, Any]:
    from gateway.engines.device import choose_compute_path

    compute = choose_compute_path()  # before MLX is imported: OpenBLAS first
    import mlx.core as mx

    from gateway.config import default_cache_dir
    from gateway.modelstore.store import ModelStore

    folder = ModelStore(Path(args.cache_dir or default_cache_dir())).ensure(DEFAULT_MODEL_ID)
    dtype = mx.float32 if compute.dequantize else mx.float16
    bandwidth = Summary.of(matvec_bandwidth(args.runs, dtype))
    model, tokenizer, weight_bytes = load_model(folder)
    ceiling = bandwidth.median / weight_bytes
    workdir = Path(tempfile.mkdtemp(prefix="gateway-bench-ceiling-"))
    gateways: dict[str, RunningGateway] = {}
    rates: dict[str, list[float]] = {}
    cpu_per_token: dict[str, list[float]] = {}
    try:
        gateways["gateway"] = start_gateway(workdir / "gateway")
        if args.baseline:
            source = str(Path(args.baseline).resolve())
            gateways["baseline"] = start_gateway(
                workdir / "baseline", extra_env={"PYTHONPATH": source}
            )
        clients = {who: gateway.http() for who, gateway in gateways.items()}
        for index in range(args.runs + 1):
            measured = {"mlx-lm generate_step": mlx_lm_decode(model, tokenizer, args.max_tokens)}
            loop_cpu: dict[str, float] = {}
            for who, client in clients.items():
                for name, prompt, extra in GATEWAY_ROWS:
                    rate, cpu = gateway_decode(
                        gateways[who], client, prompt, extra, args.max_tokens
                    )
                    measured[f"{who}: {name}"] = rate
                    if cpu is not None:
                        loop_cpu[f"{who}: {name}"] = cpu
            if index:  # the first run is the warm-up
                for name, rate in measured.items():
                    rates.setdefault(name, []).append(rate)
                for name, cpu in loop_cpu.items():
                    cpu_per_token.setdefault(name, []).append(cpu)
    finally:
        for gateway in gateways.values():
            gateway.stop()
    profile = step_profile(model)
    summaries = {name: Summary.of(values) for name, values in rates.items()}
    cpu_summaries = {name: Summary.of(values) for name, values in cpu_per_token.items()}
    gigabytes = [r / 1e9 for r in (bandwidth.min, bandwidth.median, bandwidth.max)]
    print(
        table(
            [
                ("matrix-vector bandwidth (GB/s)", str(dtype), Summary.of(gigabytes)),
                *(("decode tokens/s", name, s) for name, s in summaries.items()),
                *(("event-loop CPU per token (us)", n, s) for n, s in cpu_summaries.items()),
            ],
        )
    )
    print(f"\nweights read per token: {weight_bytes / 1e6:.1f} MB")
    print(f"ceiling: {ceiling:.1f} tokens/s (bandwidth median / weights bytes)")
    for name, s in summaries.items():
        print(f"  {name:34} median {s.median / ceiling:6.1%} of the ceiling")
    if args.baseline:
        for name, _prompt, _extra in GATEWAY_ROWS:
            after, before = summaries[f"gateway: {name}"], summaries[f"baseline: {name}"]
            print(f"  {name:34} this / baseline (medians): {after.median / before.median:.3f}")
    print("\none decode step (100 tokens of context), medians:")
    for name, milliseconds in profile.items():
        print(f"  {name:34} {milliseconds:8.2f} ms")
    return {
        "benchmark": "ceiling",
        "runs": args.runs,
        "max_tokens": args.max_tokens,
        "baseline": args.baseline,
        "weights_bytes": weight_bytes,
        "matvec_bytes_per_second": bandwidth.as_dict(),
        "ceiling_tokens_per_second": ceiling,
        "decode_tokens_per_second": {name: s.as_dict() for name, s in summaries.items()},
        "fraction_of_ceiling": {name: s.median / ceiling for name, s in summaries.items()},
        "event_loop_cpu_microseconds_per_token": {n: s.as_dict() for n, s in cpu_summaries.items()},
        "decode_step_milliseconds": profile,
    }


def main(args: argparse.Namespace) -> int:
    write_json(args.json, run(args))
    return 0
