"""Failover with nothing lost, 20 of 20: a peer SIGKILLed mid-stream, every time.

Starts two gateways on the embedded model: A, with B as its peer. Each run keeps A's slot
busy (a long streamed user generation), so A hands a greedy streamed chat completion to B;
after a varying number of text chunks B is killed (SIGKILL) and A's busy stream is dropped,
so A finishes the request itself from the token ids it received. The client's text must be
identical to an uninterrupted run's. B is restarted on the same port for the next run.
With ``--seed N`` the chat is sampled (temperature 0.9, top_p 0.95, that seed) instead of
greedy: A's resumed sampler skips the draws B made, so the text must still be identical.
Run: .venv/bin/python ops/check_peer_failover.py [--runs 20] [--seed N]
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.e2e.test_peers import MODEL, QUESTION, SECRET, Busy, greedy, health, wait_until
from testsupport.process import start_gateway


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--seed", type=int, help="sample with this seed instead of greedy")
    args = parser.parse_args()
    sampling: dict[str, float | int] = {"temperature": 0}
    if args.seed is not None:
        sampling = {"temperature": 0.9, "top_p": 0.95, "seed": args.seed}
    workdir = Path(tempfile.mkdtemp(prefix="peer-failover-"))
    b_config = {"peers": {"secret": SECRET, "node_id": "B"}}
    b = start_gateway(workdir / "b", b_config)
    a = start_gateway(
        workdir / "a",
        {
            "peers": {
                "secret": SECRET,
                "node_id": "A",
                "nodes": [b.base_url],
                "heartbeat_seconds": 0.5,
                "stall_seconds": 3,
            }
        },
    )
    identical = 0
    try:
        reference = greedy(a, max_tokens=60, **sampling)
        for run in range(args.runs):
            wait_until(lambda: all(p["state"] == "up" for p in health(a)["peers"]))
            kill_after = 2 + run % 10
            started = time.perf_counter()
            client = a.openai(timeout=300)
            with (
                Busy(a, 300) as busy,
                client.chat.completions.with_streaming_response.create(
                    model=MODEL, messages=QUESTION, max_tokens=60, stream=True, **sampling
                ) as response,
            ):
                served_by = response.headers.get("x-gateway-peer")
                parts: list[str] = []
                for chunk in response.parse():
                    if chunk.choices and chunk.choices[0].delta.content:
                        parts.append(chunk.choices[0].delta.content)
                        if len(parts) == kill_after:
                            os.kill(b.process.pid, signal.SIGKILL)
                            busy.__exit__()
            same = "".join(parts) == reference
            identical += same
            print(
                f"run {run + 1:2d}: served by {served_by}, killed after {kill_after} chunks, "
                f"{'identical' if same else 'DIFFERENT'} ({time.perf_counter() - started:.1f} s)",
                flush=True,
            )
            if not same:
                print(f"   got:      {''.join(parts)!r}\n   expected: {reference!r}")
            b.process.wait()
            b = start_gateway(workdir / "b", b_config, port=b.port)
    finally:
        a.stop()
        b.stop()
    print(f"\n{identical} of {args.runs} runs identical to the uninterrupted text")


if __name__ == "__main__":
    main()
