"""Where the gateway's own host time goes: a per-thread sampling profile of a serving process.

Set ``GATEWAY_PROFILE_DIR`` and ``gateway serve`` samples, once it serves, the Python stack of
each of its threads (the event loop, the inference thread, rendering workers) every
``SAMPLE_SECONDS``; at shutdown it writes one text summary per thread into that folder: the
functions seen running (own time) and on the stack (cumulative), as shares of the samples. A
thread waiting in C (``epoll``, an MLX evaluation with the GIL released) shows at the Python
line that called it, so idle time is visible as such.

Sampling rather than ``cProfile``: since Python 3.12 ``cProfile`` sits on ``sys.monitoring``,
whose tools are per interpreter, not per thread (a second thread's profiler cannot start: seen
on the device machine, where it hung the inference thread), and a deterministic profiler
slows Python-heavy code several times. For benchmarks only (``gateway bench ceiling``).
"""

from __future__ import annotations

import os
import re
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

PROFILE_DIR_ENV = "GATEWAY_PROFILE_DIR"
SAMPLE_SECONDS = 0.002
SUMMARY_LINES = 30
MAX_DEPTH = 200


def _where(frame: FrameType) -> str:
    code = frame.f_code
    path = code.co_filename
    for marker in ("site-packages/", "/gateway/", "/lib/python"):
        if marker in path:
            path = path[path.index(marker) + len(marker) :]
            break
    return f"{path}:{code.co_firstlineno}({code.co_name})"


class ThreadSampler:
    """Samples every thread's stack from a thread of its own, between ``start`` and
    ``finish``; ``finish`` writes the summaries (once)."""

    def __init__(self, folder: Path, interval: float = SAMPLE_SECONDS) -> None:
        self.folder = folder
        self.interval = interval
        self.own: dict[str, Counter[str]] = {}  # thread name -> innermost function counts
        self.cumulative: dict[str, Counter[str]] = {}  # thread name -> functions on the stack
        self.samples: Counter[str] = Counter()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._finished = False

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="profile-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        me = threading.get_ident()
        names: dict[int, str] = {}
        while not self._stop.wait(self.interval):
            frames = sys._current_frames()
            if any(ident not in names for ident in frames):
                names = {t.ident: t.name for t in threading.enumerate() if t.ident is not None}
            for ident, frame in frames.items():
                if ident != me:
                    self._count(names.get(ident, str(ident)), frame)

    def _count(self, thread: str, frame: FrameType) -> None:
        self.samples[thread] += 1
        self.own.setdefault(thread, Counter())[_where(frame)] += 1
        seen: set[str] = set()
        current: FrameType | None = frame
        while current is not None and len(seen) < MAX_DEPTH:
            seen.add(_where(current))
            current = current.f_back
        self.cumulative.setdefault(thread, Counter()).update(seen)

    def finish(self) -> None:
        if self._finished:
            return
        self._finished = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.write()

    def write(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        for thread, total in self.samples.items():
            lines = [f"{thread}: {total} samples, one every {self.interval * 1e3:g} ms"]
            for title, counts in (
                ("own (innermost Python frame)", self.own[thread]),
                ("cumulative (on the stack)", self.cumulative[thread]),
            ):
                lines.append(f"\n{title}:")
                lines += [
                    f"{100 * n / total:6.1f}%  {where}"
                    for where, n in counts.most_common(SUMMARY_LINES)
                ]
            slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", thread).strip("_")
            (self.folder / f"{slug}.txt").write_text("\n".join(lines) + "\n")
        print(f"profiles of {len(self.samples)} threads in {self.folder}", file=sys.stderr)


@contextmanager
def maybe_profile_threads() -> Iterator[ThreadSampler | None]:
    """A sampler for this server if ``GATEWAY_PROFILE_DIR`` is set, else None.

    The server calls ``start`` once it serves and ``finish`` at the end of its shutdown:
    uvicorn ends a process stopped by a signal by raising that signal again once it has shut
    down, after which nothing else runs.
    """
    folder = os.environ.get(PROFILE_DIR_ENV)
    if not folder:
        yield None
        return
    sampler = ThreadSampler(Path(folder))
    try:
        yield sampler
    finally:
        sampler.finish()


def read_summaries(folder: Path) -> dict[str, str]:
    """The summaries a sampler wrote into ``folder``: thread name -> text."""
    return {path.stem: path.read_text() for path in sorted(folder.glob("*.txt"))}
