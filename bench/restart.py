"""A persisted prefix cache: time to first token after a restart vs a warm in-process hit.

The fixed 1,500-token context of ``bench typing`` is warmed once by a typing hint (which
also saves it to disk). Each run then restarts the gateway on the same cache folder and
measures the first request (its context comes from disk), then a second request with
another new message in the same process (its context comes from memory): the two rows
compare side by side, run by run. The first run is the discarded warm-up.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from bench.hints import NEW_MESSAGE, _ready_hint, _ttft, fixed_context
from bench.stats import Summary, ratio, table, write_json
from testsupport.process import start_gateway

OTHER_MESSAGE = "And which one should I keep for last?"


def run(args: argparse.Namespace) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="gateway-bench-restart-"))
    context = fixed_context("restart")
    gateway = start_gateway(workdir)
    try:
        with gateway.http() as client:
            _ready_hint(client, context)
    finally:
        gateway.stop()
    restarted: list[float] = []
    in_process: list[float] = []
    covered: list[int] = []
    for index in range(args.runs + 1):
        # New messages each run: only the fixed context can come from a cache (entries saved
        # at the previous shutdown hold earlier runs' messages, which these do not extend).
        first = f"{NEW_MESSAGE} (Trip {index}.)"
        second = f"{OTHER_MESSAGE} (Trip {index}.)"
        gateway = start_gateway(workdir)
        try:
            with gateway.http() as client:
                ttft, usage = _ttft(client, [*context, {"role": "user", "content": first}])
                restarted.append(ttft)
                covered.append(int(usage["prompt_tokens_details"]["cached_tokens"]))
                ttft, _ = _ttft(client, [*context, {"role": "user", "content": second}])
                in_process.append(ttft)
        finally:
            gateway.stop()
    after_restart, warm = Summary.of(restarted[1:]), Summary.of(in_process[1:])
    print(
        table(
            [
                ("time to first token (s)", "after a restart (disk)", after_restart),
                ("time to first token (s)", "warm in-process hit", warm),
            ]
        )
    )
    slower = ratio(after_restart, warm)
    print(f"\ncached tokens of the first request after each restart: {covered[1:]}")
    print(f"after a restart / warm in-process (medians): {slower:.2f}x   (goal <= 1.5)")
    return {
        "benchmark": "restart",
        "runs": args.runs,
        "ttft_after_restart": after_restart.as_dict(),
        "ttft_warm_in_process": warm.as_dict(),
        "ratio": slower,
        "cached_tokens_after_restart": covered[1:],
    }


def main(args: argparse.Namespace) -> int:
    write_json(args.json, run(args))
    return 0
