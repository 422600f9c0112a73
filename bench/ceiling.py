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
  worktree of an earlier commit), for a before/after in one run;
* ``mlx_lm.server`` on the same weights (``--versus-server``), streamed the same way;
* the CPU of the gateway's other threads per token (the inference thread, MLX's own);
* with ``--variant NAME:SECTION.KEY=VALUE``, another gateway of this source with one setting
  changed (``unpaced:scheduler.token_flush_seconds=0``, ``eager:tiers.default.decode_step=eager``);
  ``--rows`` keeps only some rows;
* with ``--engine-row``, the gateway's own engine in this process (``MLXRunner.generate``:
  the same decode loop, detokenizer and stop matcher, no HTTP, no event loop): what the
  gateway costs on the inference thread apart from serving;
* with ``--profile-dir``, one more gateway run under a per-thread profiler
  (``gateway.profiling``): where the event loop's and the inference thread's time goes.

``--model-folder`` measures an mlx-lm folder (a GPU's bf16 or synthetic model) instead of
the embedded default; every gateway serves it under the default model's id
(``process.store_serving``), the baseline's older source too.

A profile of one decode step follows: the forward pass, the same weights' matrix-vector
products alone (the part the ceiling counts), the Python time to build the step's graph
(hidden behind the computation by mlx-lm's pipelining as long as it is shorter), the
vocabulary projection's share, and the gateway's compiled step (``gateway.engines.
compiled_step``): its pass, and the Python time of its call.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.stats import Summary, table, write_json
from bench.streaming import stream_chat
from gateway.modelstore.store import DEFAULT_MODEL_ID
from testsupport.process import (
    RunningGateway,
    RunningUpstream,
    baseline_env,
    start_gateway,
    start_mlx_lm_server,
    store_serving,
)

SERVER = "mlx_lm.server"
# The tier a gateway has when none is set (``Settings``): what a variant's tier starts from.
IMPLICIT_TIER = {"model": DEFAULT_MODEL_ID, "keep_alive_seconds": 0, "preload": True}
PROFILED_REQUESTS = 8

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


def engine_decode(runner: Any, max_tokens: int) -> float:
    """Tokens/s of the gateway's engine (greedy), first token event to last, in process."""
    from gateway.seam.backend import SamplingParams, TokenEvent

    prompt = runner.render_chat([{"role": "user", "content": PROMPT}])
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0)
    times = [
        time.perf_counter()
        for event in runner.generate(prompt, params)
        if isinstance(event, TokenEvent) and event.token_ids
    ]
    return (len(times) - 1) / (times[-1] - times[0])


def variant_config(config: dict[str, Any], spec: str) -> tuple[str, dict[str, Any]]:
    """``NAME:KEY=VALUE[,KEY=VALUE...]`` -> (NAME, ``config`` with those settings), a KEY a
    dotted path (``scheduler.token_flush_seconds``, ``tiers.default.decode_step``). A tier
    named without a model is the implicit one's: the default model, loaded at start."""
    name, settings = spec.split(":", 1)
    changed = copy.deepcopy(config)
    for setting in settings.split(","):
        key, raw = setting.split("=", 1)
        *sections, field = key.split(".")
        table = changed
        for section in sections:
            table = table.setdefault(section, {})
        try:
            table[field] = json.loads(raw)
        except ValueError:
            table[field] = raw
    for tier in changed.get("tiers", {}).values():
        for key, value in IMPLICIT_TIER.items():
            tier.setdefault(key, value)
    return name, changed


def chat_body(prompt: str, extra: dict[str, Any], max_tokens: int, model: str) -> dict[str, Any]:
    return {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        # The usage counts the tokens that had no text of their own (a character split over
        # tokens, frequent with random weights): the rate counts every token.
        "stream_options": {"include_usage": True},
        **extra,
    }


def gateway_decode(
    gateway: RunningGateway,
    client: httpx.Client,
    prompt: str,
    extra: dict[str, Any],
    max_tokens: int,
) -> tuple[float, float | None, float | None]:
    """Tokens/s a client sees from a streamed greedy chat, and the microseconds of CPU per
    token of the server's event-loop thread (HTTP, SSE, the serving layers: Python work per
    token that is not the model's) and of its other threads (the inference thread's Python
    and MLX's own threads), where Linux tells."""
    before = thread_cpu_ns(gateway.process.pid)
    streamed = stream_chat(client, chat_body(prompt, extra, max_tokens, DEFAULT_MODEL_ID))
    after = thread_cpu_ns(gateway.process.pid)
    tokens = max(streamed.usage.get("completion_tokens", len(streamed.times)), 1)
    if before is None or after is None:
        return streamed.decode_tokens, None, None
    loop = (after[0] - before[0]) / tokens / 1e3
    others = (after[1] - before[1]) / tokens / 1e3
    return streamed.decode_tokens, loop, others


def server_decode(server: RunningUpstream, client: httpx.Client, max_tokens: int) -> float:
    """Tokens/s of ``mlx_lm.server`` on the same request (plain)."""
    body = chat_body(PROMPT, {}, max_tokens, server.model)
    return stream_chat(client, body, "chat/completions").decode_tokens


def thread_cpu_ns(pid: int) -> tuple[int, int] | None:
    """CPU nanoseconds of a process's main thread (its event loop) and of all its other
    threads together, from Linux's per-thread schedstat."""
    main = 0
    others = 0
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            try:
                ns = int(Path(f"/proc/{pid}/task/{task}/schedstat").read_text().split()[0])
            except (OSError, ValueError, IndexError):
                continue  # a thread that ended meanwhile
            if task == str(pid):
                main = ns
            else:
                others += ns
    except OSError:
        return None
    return main, others


def event_loop_cpu_ns(gateway: RunningGateway) -> int | None:
    """CPU nanoseconds of the server's main thread (its event loop), from Linux's schedstat."""
    both = thread_cpu_ns(gateway.process.pid)
    return both[0] if both else None


def profiled_run(
    workdir: Path, config: dict[str, Any], env: dict[str, str], cwd: Path | None, max_tokens: int
) -> dict[str, str]:
    """A gateway under the per-thread profiler (``gateway.profiling``), a few plain streamed
    chats, then its summaries: thread name -> the top of its profile by own time."""
    from gateway.profiling import PROFILE_DIR_ENV, read_summaries

    folder = workdir / "profile"
    gateway = start_gateway(
        workdir, config, extra_env={**env, PROFILE_DIR_ENV: str(folder)}, cwd=cwd
    )
    try:
        with gateway.http() as client:
            for _ in range(PROFILED_REQUESTS):
                stream_chat(client, chat_body(PROMPT, {}, max_tokens, DEFAULT_MODEL_ID))
    finally:
        gateway.stop()
    return read_summaries(folder)


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
    # (Quantized weights are packed integers: their products are not comparable; skipped.)
    floating = (mx.bfloat16, mx.float16, mx.float32)
    matrices = [value for _, value in parameters if value.ndim == 2 and value.dtype in floating]
    vectors = {m.shape[1]: mx.random.normal((1, m.shape[1])).astype(m.dtype) for m in matrices}
    mx.eval(list(vectors.values()))

    def matvecs() -> None:
        mx.eval([vectors[m.shape[1]] @ m.T for m in matrices])

    head = max(matrices, key=lambda m: m.size)  # the vocabulary projection (or embedding)

    def projection() -> None:
        mx.eval(vectors[head.shape[1]] @ head.T)

    from gateway.engines.compiled_step import CompiledStep

    compiled, _reason = CompiledStep.probe(model, 42)

    def compiled_forward() -> None:
        assert compiled is not None
        mx.eval(compiled(token[0], cache))
        rewind()

    def compiled_build_only() -> None:
        assert compiled is not None
        built.append(compiled(token[0], cache))
        rewind()

    profile = {
        "forward pass": timed(forward, 20),
        "matrix-vector products alone": timed(matvecs, 20),
        "vocabulary projection alone": timed(projection, 20),
        "graph building (Python)": timed(build_only, 20),
    }
    if compiled is not None:  # the gateway's step (``gateway.engines.compiled_step``)
        compiled_forward()  # traced for this buffer's size
        profile["compiled step"] = timed(compiled_forward, 20)
        profile["compiled step, the call alone (Python)"] = timed(compiled_build_only, 20)
    mx.eval(built)
    return {name: seconds * 1e3 for name, seconds in profile.items()}


def run(args: argparse.Namespace) -> dict[str, Any]:
    from gateway.engines.device import choose_compute_path

    compute = choose_compute_path()  # before MLX is imported: OpenBLAS first
    import mlx.core as mx

    from gateway.config import default_cache_dir
    from gateway.modelstore.store import ModelStore

    workdir = Path(tempfile.mkdtemp(prefix="gateway-bench-ceiling-"))
    load = os.getloadavg()
    config: dict[str, Any] = {}
    if args.model_folder:
        folder = Path(args.model_folder)
        config["cache_dir"] = str(store_serving(folder, workdir / "store"))
    else:
        folder = ModelStore(Path(args.cache_dir or default_cache_dir())).ensure(DEFAULT_MODEL_ID)
    dtype = (
        mx.float32
        if compute.dequantize
        else mx.bfloat16
        if compute.device == "cuda"
        else mx.float16
    )
    bandwidth = Summary.of(matvec_bandwidth(args.runs, dtype))
    model, tokenizer, weight_bytes = load_model(folder)
    ceiling = bandwidth.median / weight_bytes
    gateways: dict[str, RunningGateway] = {}
    envs: dict[str, dict[str, str]] = {"gateway": {}}
    cwds: dict[str, Path | None] = {"gateway": None}
    configs: dict[str, dict[str, Any]] = {"gateway": config}
    for spec in args.variant or ():
        name, changed = variant_config(config, spec)
        configs[name], envs[name], cwds[name] = changed, {}, None
    rows = [row for row in GATEWAY_ROWS if not args.rows or row[0] in args.rows]
    runner = None
    if args.engine_row:
        from gateway.engines.mlx_runner import MLXRunner

        runner = MLXRunner(DEFAULT_MODEL_ID, folder, compute)
    server: RunningUpstream | None = None
    rates: dict[str, list[float]] = {}
    cpu_per_token: dict[str, list[float]] = {}
    try:
        gateways["gateway"] = start_gateway(workdir / "gateway", config)
        if args.baseline:
            envs["baseline"] = baseline_env(args.baseline)
            cwds["baseline"] = workdir / "baseline"
            gateways["baseline"] = start_gateway(
                workdir / "baseline", config, extra_env=envs["baseline"], cwd=cwds["baseline"]
            )
        for name in configs.keys() - {"gateway"}:
            gateways[name] = start_gateway(workdir / name, configs[name])
        if args.versus_server:
            server = start_mlx_lm_server(workdir / "server", folder)
        clients = {who: gateway.http() for who, gateway in gateways.items()}
        server_client = (
            httpx.Client(base_url=server.base_url + "/", timeout=600) if server else None
        )
        for index in range(args.runs + 1):
            measured = {"mlx-lm generate_step": mlx_lm_decode(model, tokenizer, args.max_tokens)}
            if runner is not None:
                measured["gateway engine (in process)"] = engine_decode(runner, args.max_tokens)
            if server is not None and server_client is not None:
                measured[SERVER] = server_decode(server, server_client, args.max_tokens)
            thread_cpu: dict[str, float] = {}
            for who, client in clients.items():
                for name, prompt, extra in rows:
                    rate, loop, others = gateway_decode(
                        gateways[who], client, prompt, extra, args.max_tokens
                    )
                    measured[f"{who}: {name}"] = rate
                    if loop is not None and others is not None:
                        thread_cpu[f"{who}: {name}: event loop"] = loop
                        thread_cpu[f"{who}: {name}: other threads"] = others
            if index:  # the first run is the warm-up
                for name, rate in measured.items():
                    rates.setdefault(name, []).append(rate)
                for name, cpu in thread_cpu.items():
                    cpu_per_token.setdefault(name, []).append(cpu)
    finally:
        for gateway in gateways.values():
            gateway.stop()
        if server is not None:
            server.stop()
    profiles: dict[str, dict[str, str]] = {}
    if args.profile_dir:
        for who in ("gateway",):  # this source's: the others' differ in a setting or two
            try:
                profiles[who] = profiled_run(
                    Path(args.profile_dir) / who,
                    configs.get(who, config),
                    envs[who],
                    cwds[who],
                    args.max_tokens,
                )
            except (httpx.HTTPError, RuntimeError) as exc:  # the measurements above stand
                profiles[who] = {"error": f"{type(exc).__name__}: {exc}"}
    load_after = os.getloadavg()
    profile = step_profile(model)
    summaries = {name: Summary.of(values) for name, values in rates.items()}
    cpu_summaries = {name: Summary.of(values) for name, values in cpu_per_token.items()}
    gigabytes = [r / 1e9 for r in (bandwidth.min, bandwidth.median, bandwidth.max)]
    print(
        table(
            [
                ("matrix-vector bandwidth (GB/s)", str(dtype), Summary.of(gigabytes)),
                *(("decode tokens/s", name, s) for name, s in summaries.items()),
                *(("thread CPU per token (us)", n, s) for n, s in cpu_summaries.items()),
            ],
        )
    )
    print(f"\nweights read per token: {weight_bytes / 1e6:.1f} MB")
    print(f"ceiling: {ceiling:.1f} tokens/s (bandwidth median / weights bytes)")
    for name, s in summaries.items():
        print(f"  {name:34} median {s.median / ceiling:6.1%} of the ceiling")
    generate_step = summaries["mlx-lm generate_step"]
    for who in gateways:
        for name, _prompt, _extra in rows:
            this = summaries[f"{who}: {name}"]
            print(
                f"  {who + ': ' + name:34} / generate_step: {this.median / generate_step.median:.3f}"
                + (
                    f", / baseline: {this.median / summaries['baseline: ' + name].median:.3f}"
                    if "baseline" in gateways
                    else ""
                )
            )
    print(f"load average (1, 5, 15 min) at the start {load}, at the end {load_after}")
    print("\none decode step (100 tokens of context), medians:")
    for name, milliseconds in profile.items():
        print(f"  {name:34} {milliseconds:8.2f} ms")
    return {
        "benchmark": "ceiling",
        "model_folder": str(folder),
        "compute": compute.as_dict(),
        "runs": args.runs,
        "max_tokens": args.max_tokens,
        "baseline": args.baseline,
        "variants": args.variant or [],
        "load_average": {"start": load, "end": load_after},
        "weights_bytes": weight_bytes,
        "matvec_bytes_per_second": bandwidth.as_dict(),
        "ceiling_tokens_per_second": ceiling,
        "decode_tokens_per_second": {name: s.as_dict() for name, s in summaries.items()},
        "fraction_of_ceiling": {name: s.median / ceiling for name, s in summaries.items()},
        "thread_cpu_microseconds_per_token": {n: s.as_dict() for n, s in cpu_summaries.items()},
        "decode_step_milliseconds": profile,
        "profiles": profiles,
    }


def main(args: argparse.Namespace) -> int:
    write_json(args.json, run(args))
    return 0
