"""Where prompts recur: the end of a system message, worth a prefix cache of its own on disk.

Whole conversations rarely come back, but their system message does (an assistant's
instructions, a task's static part, which is its system message). A saved entry that ends
exactly there is the smallest file that warms every later conversation with it, and stays
useful after the conversations it came from are evicted. The boundary is found by rendering
the system message alone (and the tools, which templates put beside it) and taking the part
the whole prompt shares with it: templates that fold the system message into the first user
turn still give a prefix, just a shorter one.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

from gateway.engines.prefix_disk import MIN_REUSE_TOKENS
from gateway.engines.runner import ModelRunner
from gateway.engines.token_prefix import common_prefix
from gateway.seam.request_parts import ChatMessage, ToolSpec

DEFAULT_MAX_PREFIXES = 32
SYSTEM_ROLES = ("system", "developer")


def system_boundary(
    runner: ModelRunner,
    messages: Sequence[ChatMessage],
    tools: Sequence[ToolSpec],
    tokens: Sequence[int],
) -> int:
    """How many of ``tokens`` (the rendered conversation) are its system message; 0: none."""
    if len(messages) < 2 or messages[0].get("role") not in SYSTEM_ROLES:
        return 0  # no system message, or nothing after it (the whole prompt is saved anyway)
    alone = runner.render_chat(messages[:1], tools=tools, add_generation_prompt=False)
    return common_prefix(alone, tokens, len(tokens) - 1)


class RecurringPrefixes:
    """Token prefixes seen at a boundary lately, newest last, at most ``max_prefixes``.

    Noted from the rendering threads, read from the inference thread: hence the lock.
    """

    def __init__(self, max_prefixes: int = DEFAULT_MAX_PREFIXES) -> None:
        self.max_prefixes = max_prefixes
        self._prefixes: OrderedDict[tuple[int, ...], None] = OrderedDict()
        self._lock = threading.Lock()

    def note(self, tokens: Sequence[int], length: int) -> None:
        """``tokens[:length]`` ends at a boundary (too short a prefix is not kept)."""
        if length < MIN_REUSE_TOKENS:
            return
        prefix = tuple(tokens[:length])
        with self._lock:
            self._prefixes[prefix] = None
            self._prefixes.move_to_end(prefix)
            while len(self._prefixes) > self.max_prefixes:
                self._prefixes.popitem(last=False)

    def snapshot(self) -> list[tuple[int, ...]]:
        """Every noted prefix, oldest first."""
        with self._lock:
            return list(self._prefixes)

    def within(self, tokens: Sequence[int]) -> list[tuple[int, ...]]:
        """The noted prefixes that ``tokens`` starts with and goes beyond, oldest first."""
        tokens = tuple(tokens)
        return [p for p in self.snapshot() if len(p) < len(tokens) and tokens[: len(p)] == p]
