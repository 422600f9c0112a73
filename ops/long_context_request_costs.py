"""What a request costs beside the model at 2K and 32K tokens of context (issue 32), on a CPU.

A 2-layer synthetic Llama (``testsupport.synthetic``, SmolLM2's tokenizer and template) makes
the model's own cost small, so what grows with the context is mostly the request path's:

* ``parse``: the whole chat body sent with an unknown model (read, validated, a 404);
* ``opening, hinted``: a typing hint with the new message as its draft, followed until its
  first tokens are computed, then the chat request it predicted, timed to the first ``data:``
  line with ``"content"`` in it. That is the stream's opening chunk (the assistant's role,
  ``content: ""``), sent once the request is prepared and started or after the opening grace
  (``gateway.routes.opening``, 10 ms), whichever comes first; this row was named
  ``speculated, pause 0 s`` in the first results, whose request (no temperature: 1.0,
  unseeded) could not be served by the greedy speculation at all;
* ``first token, speculated``: the same, greedy (the speculation's sampling, so it is served
  from the speculated tokens), timed to the first non-empty content;
* ``first token, plain turn``: no hint, the context plus a new ~110-token user message (its
  context is cached by the earlier requests), timed to the first non-empty content; the
  model's own share is the raw prefill of those tokens on a cached context.

The context is prefilled once per size (one discarded warm-up), then each row runs ``--runs``
times. With ``--baseline SRC`` (another version's source folder, e.g. ``git archive`` of the
commit before), both gateways run side by side and each run alternates between them. Printed
and written as JSON with min/median/max and the load average.

    .venv/bin/python ops/long_context_request_costs.py --json out.json [--baseline /tmp/base]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PLAIN_TURN = " ".join(["Given all that, which city should I visit first, and why?"] * 8)
MAX_LOAD = 2.5  # measured only below this one-minute load average (2 cores)


def first_line(client: Any, body: dict[str, Any], opening: bool) -> float:
    """Seconds to the first ``data:`` line with content: any (the opening chunk's empty
    one) with ``opening``, else the first that carries text."""
    raw = json.dumps(body).encode()
    started = time.perf_counter()
    headers = {"content-type": "application/json"}
    with client.stream("POST", "/v1/chat/completions", content=raw, headers=headers) as reply:
        lines = reply.iter_lines()
        for line in lines:
            has_content = line.startswith("data:") and '"content"' in line
            if has_content and (opening or '"content":""' not in line):
                break
        seconds = time.perf_counter() - started
        for _ in lines:  # the rest: the next request finds the slot free
            pass
    return seconds


def wait_for_quiet(limit: float = 600.0) -> tuple[float, float, float]:
    deadline = time.monotonic() + limit
    while os.getloadavg()[0] >= MAX_LOAD and time.monotonic() < deadline:
        time.sleep(5)
    return os.getloadavg()


def speculations_served(client: Any) -> float:
    for line in client.get("/metrics").text.splitlines():
        if line.startswith("gateway_speculated_tokens_served_total"):
            return float(line.split()[-1])
    return 0.0


def one_run(client: Any, model: str, context: list[dict[str, str]], size: int) -> dict[str, float]:
    from bench.hints import NEW_MESSAGE, _speculated_hint

    messages = [*context, {"role": "user", "content": NEW_MESSAGE}]
    chat = {"model": model, "messages": messages, "max_tokens": 8, "stream": True}
    unknown = json.dumps({"model": "nope", "messages": messages}).encode()
    started = time.perf_counter()
    headers = {"content-type": "application/json"}
    client.post("/v1/chat/completions", content=unknown, headers=headers)
    seconds = {"parse": time.perf_counter() - started}
    _speculated_hint(client, context, NEW_MESSAGE)
    seconds["opening, hinted"] = first_line(client, chat, opening=True)
    _speculated_hint(client, context, NEW_MESSAGE)
    greedy = {**chat, "temperature": 0}
    seconds["first token, speculated"] = first_line(client, greedy, opening=False)
    turn = [*context, {"role": "user", "content": f"Turn {time.time_ns()}. {PLAIN_TURN}"}]
    plain = {**chat, "messages": turn, "temperature": 0}
    seconds["first token, plain turn"] = first_line(client, plain, opening=False)
    return seconds


def main(argv: list[str]) -> int:
    from gateway.engines.device import choose_compute_path

    choose_compute_path()  # before MLX is imported (its BLAS)
    from bench.hints import fixed_context, notes_for
    from bench.stats import Summary, table, write_json
    from bench.versus import same_weights
    from gateway.config import default_cache_dir
    from gateway.modelstore.store import DEFAULT_MODEL_ID, ModelStore
    from ops.gpu.models import build
    from testsupport.process import baseline_env, start_gateway

    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[2048, 32768])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--baseline", help="another version's source folder, run alongside")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="long-context-costs-"))
    smollm2 = ModelStore(default_cache_dir()).path_for(DEFAULT_MODEL_ID)
    tiny = build("tiny", workdir / "models", smollm2)
    config, _, compute = same_weights(argparse.Namespace(model_folder=str(tiny)), workdir)
    config["cache"] = {"prefix_cache_bytes": 8 * 2**30, "persist_prefix_bytes": 0}
    gateways = {"gateway": start_gateway(workdir / "gateway", config)}
    if args.baseline:
        gateways["baseline"] = start_gateway(
            workdir / "baseline", config, extra_env=baseline_env(args.baseline), cwd=workdir
        )
    rows: list[tuple[str, str, Any]] = []
    values: dict[str, dict[str, Any]] = {}
    served: dict[str, float] = {}
    load = wait_for_quiet()
    print(f"load average at the start {load}", flush=True)
    try:
        clients = {name: gateway.http() for name, gateway in gateways.items()}
        for size in args.sizes:
            context = fixed_context(f"costs-{size}", notes_for(size))
            measured: dict[tuple[str, str], list[float]] = {}
            for index in range(args.runs + 1):
                for name, client in clients.items():  # alternating: same load for both
                    seconds = one_run(client, DEFAULT_MODEL_ID, context, size)
                    if index:  # the first: the warm-up (the context's prefill)
                        for row, value in seconds.items():
                            measured.setdefault((row, name), []).append(value * 1e3)
            for (row, name), series in measured.items():
                summary = Summary.of(series)
                rows.append((f"{row} (ms) @{size}", name, summary))
                values.setdefault(name, {})[f"{row} @{size}"] = summary.as_dict()
        for name, client in clients.items():
            served[name] = speculations_served(client)
            client.close()
    finally:
        for gateway in gateways.values():
            gateway.stop()
    load_after = os.getloadavg()
    print(table(rows))
    print(f"load average at the start {load}, at the end {load_after}")
    write_json(
        args.json,
        {
            "benchmark": "long_context_request_costs",
            "compute": compute.as_dict(),
            "runs": args.runs,
            "baseline": args.baseline,
            "load_average": {"start": load, "end": load_after},
            "speculated_tokens_served": served,
            "milliseconds": values,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
