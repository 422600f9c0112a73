"""The gateway's OpenAI-upstream tier vs the same upstream called directly, in one run.

The upstream is ``mlx_lm.server`` on the imported embedded model, started here. Both variants
stream the same fixed prompt greedily and alternate run by run; the gateway's tier uses its
defaults (a loopback upstream is ``same_machine``: each request also takes the slot). The
overhead measured is the gateway's relaying: one more HTTP hop, SSE parsing and re-encoding.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path
from typing import Any

from bench.chat import measure, stream_token_times
from bench.stats import Summary, ratio, table, write_json
from testsupport.process import start_gateway, start_mlx_lm_server

TIER = "upstream"


def run(args: argparse.Namespace) -> dict[str, Any]:
    from gateway.config import default_cache_dir
    from gateway.modelstore.store import DEFAULT_MODEL_ID, ModelStore

    folder = ModelStore(Path(args.cache_dir or default_cache_dir())).ensure(DEFAULT_MODEL_ID)
    workdir = Path(tempfile.mkdtemp(prefix="gateway-bench-upstream-"))
    upstream = start_mlx_lm_server(workdir / "upstream", folder)
    gateway = None
    direct: list[dict[str, float]] = []
    relayed: list[dict[str, float]] = []
    try:
        gateway = start_gateway(
            workdir / "gateway",
            {
                "tiers": {
                    TIER: {"kind": "openai", "base_url": upstream.base_url, "model": upstream.model}
                }
            },
        )
        with gateway.http() as via_gateway, upstream_client(upstream.base_url) as straight:
            for _ in range(args.runs + 1):  # alternating; the first of each is the warm-up
                direct.append(
                    measure(
                        *stream_token_times(
                            straight, upstream.model, args.max_tokens, "chat/completions"
                        ),
                        0,
                    )
                )
                relayed.append(measure(*stream_token_times(via_gateway, TIER, args.max_tokens), 0))
    finally:
        if gateway is not None:
            gateway.stop()
        upstream.stop()
    direct, relayed = direct[1:], relayed[1:]
    names = (("mlx_lm.server direct", direct), ("gateway upstream tier", relayed))
    summaries = {
        (metric, name): Summary.of([r[metric] for r in runs])
        for metric in ("ttft_s", "decode_tps", "tokens")
        for name, runs in names
    }
    print(table([(m, n, s) for (m, n), s in summaries.items()]))
    decode_ratio = ratio(
        summaries[("decode_tps", "gateway upstream tier")],
        summaries[("decode_tps", "mlx_lm.server direct")],
    )
    ttft_overhead_ms = 1000 * (
        summaries[("ttft_s", "gateway upstream tier")].median
        - summaries[("ttft_s", "mlx_lm.server direct")].median
    )
    # The minimum is the least noisy estimate of a fixed overhead on a shared machine.
    ttft_overhead_min_ms = 1000 * (
        summaries[("ttft_s", "gateway upstream tier")].min
        - summaries[("ttft_s", "mlx_lm.server direct")].min
    )
    # Each gateway run follows its direct run at once: the median of the pairs' differences
    # cancels the slow drift of a shared machine better than a difference of medians.
    paired_ms = 1000 * statistics.median(
        g["ttft_s"] - d["ttft_s"] for d, g in zip(direct, relayed, strict=True)
    )
    print(f"\ngateway/direct decode tokens/s (medians): {decode_ratio:.3f}   (goal >= 0.95)")
    print(
        f"gateway - direct time to first token (medians): {ttft_overhead_ms:+.1f} ms   (goal <= 20)"
    )
    return {
        "benchmark": "upstream",
        "runs": args.runs,
        "max_tokens": args.max_tokens,
        "summaries": {f"{m}/{n}": s.as_dict() for (m, n), s in summaries.items()},
        "decode_ratio_gateway_over_direct": decode_ratio,
        "ttft_overhead_ms": ttft_overhead_ms,
        "ttft_overhead_min_ms": ttft_overhead_min_ms,
        "ttft_overhead_paired_median_ms": paired_ms,
    }


def upstream_client(base_url: str) -> Any:
    import httpx

    return httpx.Client(base_url=base_url.rstrip("/") + "/", timeout=300)


def main(args: argparse.Namespace) -> int:
    write_json(args.json, run(args))
    return 0
