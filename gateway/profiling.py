"""Where the gateway's own host time goes: a per-thread profile of a serving process.

Set ``GATEWAY_PROFILE_DIR`` and ``gateway serve`` profiles its event loop (the main thread)
and every thread it starts (the inference thread, rendering workers) with ``cProfile``, each
thread with its own profiler; at shutdown it writes one ``.pstats`` file and one text summary
per thread into that folder. For benchmarks only (``gateway bench ceiling`` reads them): a
deterministic profiler slows Python-heavy code, so its rates are not the served rates and its
shares are what to read.
"""

from __future__ import annotations

import cProfile
import io
import os
import pstats
import re
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

PROFILE_DIR_ENV = "GATEWAY_PROFILE_DIR"
SUMMARY_LINES = 40


class ThreadProfiles:
    """Per-thread profilers, enabled once the server has started (its start-up, imports and
    model load are not what is measured) and written when it stops."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.profilers: dict[str, cProfile.Profile] = {}
        self.serving = threading.Event()
        self._lock = threading.Lock()
        self._finished = False

    def _in_thread(self, frame: FrameType, event: str, arg: Any) -> None:
        # Installed in every thread started from now on: until serving starts this stays the
        # thread's profile function; then the thread's own profiler replaces it.
        if not self.serving.is_set():
            return
        profiler = cProfile.Profile()
        with self._lock:
            self.profilers[threading.current_thread().name] = profiler
        profiler.enable()

    def install(self) -> None:
        """Before the threads are started (the server's start-up)."""
        threading.setprofile(self._in_thread)

    def start(self) -> None:
        """Serving has begun: profile the event loop (this thread) and the other threads."""
        main = cProfile.Profile()
        self.profilers["main (event loop)"] = main
        self.serving.set()
        main.enable()

    def finish(self) -> None:
        """Stop and write the profiles (once)."""
        if self._finished:
            return
        self._finished = True
        main = self.profilers.get("main (event loop)")
        if main is not None:
            main.disable()
        threading.setprofile(None)  # type: ignore[arg-type]
        write_profiles(self.folder, self.profilers)


@contextmanager
def maybe_profile_threads() -> Iterator[ThreadProfiles | None]:
    """Per-thread profiles of this server if ``GATEWAY_PROFILE_DIR`` is set, else None.

    The server calls ``start`` once it serves and ``finish`` at the end of its shutdown:
    uvicorn ends a process stopped by a signal by raising that signal again once it has shut
    down, after which nothing else runs.
    """
    folder = os.environ.get(PROFILE_DIR_ENV)
    if not folder:
        yield None
        return
    profiles = ThreadProfiles(Path(folder))
    profiles.install()
    try:
        yield profiles
    finally:
        profiles.finish()


def write_profiles(folder: Path, profilers: dict[str, cProfile.Profile]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, profiler in profilers.items():
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_")
        try:
            profiler.create_stats()
            stats = pstats.Stats(profiler)
        except (TypeError, ValueError):  # a thread that never ran a profiled call
            continue
        stats.dump_stats(str(folder / f"{slug}.pstats"))
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(SUMMARY_LINES)
        (folder / f"{slug}.txt").write_text(text.getvalue())
    print(f"profiles of {len(profilers)} threads written to {folder}", file=sys.stderr)
