"""``python -m gateway.engines.distributed.watchdog PARENT_PID -- COMMAND...``

The leader of a cluster's process group: runs ``mlx.launch`` as its child and ends the whole
group (launcher, local ranks, ssh sessions to the other hosts) when the gateway that started
it is gone, even after a ``kill -9`` that gave the gateway no chance to stop it. A normal stop
signals the group from the gateway (``ClusterSupervisor.stop``); this covers the rest. macOS has
no parent-death signal, so the parent is polled. Exits with the launcher's code.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

POLL_SECONDS = 0.5
GRACE_SECONDS = 5.0


def end_group() -> None:
    """SIGTERM to the group, then SIGKILL to whatever is left (this process included)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    os.killpg(os.getpgrp(), signal.SIGTERM)
    time.sleep(GRACE_SECONDS)
    os.killpg(os.getpgrp(), signal.SIGKILL)


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print(__doc__, file=sys.stderr)
        return 2
    parent = int(argv[0])
    child = subprocess.Popen(argv[2:])
    while True:
        code = child.poll()
        if code is not None:
            return code
        if os.getppid() != parent:
            end_group()
        time.sleep(POLL_SECONDS)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
