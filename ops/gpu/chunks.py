"""Where a user waits behind a background prefill, chunk by chunk (issue 23 on a GPU).

Starts the gateway on MODEL_FOLDER with debug logging, measures the user's TTFT idle and then
three times behind four long-prompt background jobs in prefill (``bench.priority``'s load),
and prints the runner's per-chunk log lines (tokens, milliseconds, position) around each
measurement, with the user's slot wait. Usage: ``python ops/gpu/chunks.py MODEL_FOLDER``.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from bench.priority import BackgroundLoad, user_ttft_and_wait
from testsupport.process import start_gateway, store_serving


def main(folder: str) -> int:
    workdir = Path(tempfile.mkdtemp(prefix="gateway-chunks-"))
    config = {
        "cache": {"prefix_cache_bytes": 0},
        "cache_dir": str(store_serving(Path(folder), workdir / "store")),
        "log_level": "debug",
    }
    gateway = start_gateway(workdir / "gateway", config)
    try:
        with gateway.http() as client:
            for run in range(4):
                idle = user_ttft_and_wait(client)
                with BackgroundLoad(gateway, in_prefill=True):
                    behind = user_ttft_and_wait(client)
                print(f"run {run}: idle ttft/wait {idle}, behind prefill ttft/wait {behind}")
        wanted = ("prefill chunk", "paused", "starts after")
        lines = [line for line in gateway.log().splitlines() if any(w in line for w in wanted)]
    finally:
        gateway.stop()
    print(f"{len(lines)} lines of chunks and jobs; the last 160:")
    print("\n".join(lines[-160:]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
