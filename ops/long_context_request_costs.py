"""What a request costs beside the model at 2K and 32K tokens of context (issue 32), on a CPU.

A 2-layer synthetic Llama (``testsupport.synthetic``, SmolLM2's tokenizer and template) makes
the model's own cost next to nothing, so what grows with the context is the request path's:

* ``parse``: the whole chat body sent with an unknown model (read, validated, a 404);
* ``speculated``: a typing hint with the new message as its draft, followed until its first
  tokens are computed, then the chat request it predicted (time to the first content chunk),
  with no pause and with a 1 s pause between the two (a speculation still running when the
  request comes is stopped first: the pause tells whether that is the cost).

The context is prefilled once per size (one discarded warm-up), then each row runs ``--runs``
times. Printed and written as JSON with min/median/max and the load average.

    .venv/bin/python ops/long_context_request_costs.py --json out.json
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


def first_content(client: Any, body: dict[str, Any]) -> float:
    raw = json.dumps(body).encode()
    started = time.perf_counter()
    headers = {"content-type": "application/json"}
    with client.stream("POST", "/v1/chat/completions", content=raw, headers=headers) as reply:
        for line in reply.iter_lines():
            if line.startswith("data:") and '"content"' in line:
                break
    return time.perf_counter() - started


def main(argv: list[str]) -> int:
    from gateway.engines.device import choose_compute_path

    choose_compute_path()  # before MLX is imported (its BLAS)
    from bench.hints import NEW_MESSAGE, _speculated_hint, fixed_context, notes_for
    from bench.stats import Summary, table, write_json
    from bench.versus import same_weights
    from gateway.config import default_cache_dir
    from gateway.modelstore.store import DEFAULT_MODEL_ID, ModelStore
    from ops.gpu.models import build
    from testsupport.process import start_gateway

    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[2048, 32768])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="long-context-costs-"))
    smollm2 = ModelStore(default_cache_dir()).path_for(DEFAULT_MODEL_ID)
    tiny = build("tiny", workdir / "models", smollm2)
    config, _, compute = same_weights(argparse.Namespace(model_folder=str(tiny)), workdir)
    config["cache"] = {"prefix_cache_bytes": 8 * 2**30, "persist_prefix_bytes": 0}
    gateway = start_gateway(workdir / "gateway", config)
    load, rows, values = os.getloadavg(), [], {}
    try:
        with gateway.http() as client:
            for size in args.sizes:
                context = fixed_context(f"costs-{size}", notes_for(size))
                messages = [*context, {"role": "user", "content": NEW_MESSAGE}]
                chat = {"model": DEFAULT_MODEL_ID, "messages": messages, "max_tokens": 8}
                chat["stream"] = True
                unknown = json.dumps({"model": "nope", "messages": messages}).encode()
                measured: dict[str, list[float]] = {}
                for index in range(args.runs + 1):
                    started = time.perf_counter()
                    client.post(
                        "/v1/chat/completions",
                        content=unknown,
                        headers={"content-type": "application/json"},
                    )
                    parse = time.perf_counter() - started
                    seconds = {"parse": parse}
                    for pause in (0.0, 1.0):
                        _speculated_hint(client, context, NEW_MESSAGE)
                        time.sleep(pause)
                        seconds[f"speculated, pause {pause:g} s"] = first_content(client, chat)
                    if index:  # the first: the warm-up (the context's prefill)
                        for name, value in seconds.items():
                            measured.setdefault(name, []).append(value * 1e3)
                for name, series in measured.items():
                    summary = Summary.of(series)
                    rows.append((f"{name} (ms) @{size}", "gateway", summary))
                    values[f"{name} @{size}"] = summary.as_dict()
    finally:
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
            "load_average": {"start": load, "end": load_after},
            "milliseconds": values,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
