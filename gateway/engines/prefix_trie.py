"""mlx-lm's prompt trie with runs of tokens on its edges: a lookup that does not walk a long
prompt token by token in Python (issue 32).

``LRUPromptCache`` finds the longest cached prefix of a prompt in a ``PromptTrie``: a dict
per token, walked one token at a time. At 32K tokens of conversation that walk took ~3 ms to
search and ~1 ms more to get the entry it found (this CPU), on every request's path to its
first token, and inserting the finished state walked twice more (~3 ms), all of it holding
the GIL. Here each edge carries a run of tokens (a radix trie): the walk compares whole runs
as tuple slices, in C, so a prompt costs a few comparisons per stored conversation it shares
a start with, not a dict step per token.

The answers are those of ``PromptTrie`` (``search``'s ``PromptTrieResult``, ``get``,
``add``, ``pop``, ``pop_prefixes``), checked against it by the unit tests; where several
longer entries are equally short, either may be chosen (both share the same prefix).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gateway.engines.token_prefix import common_prefix

_NO_VALUE: Any = object()


class _Node:
    """A point where runs branch or a value is kept; ``edges``: first token -> (run, child)."""

    __slots__ = ("edges", "value")

    def __init__(self, value: Any = _NO_VALUE) -> None:
        self.edges: dict[int, tuple[tuple[int, ...], _Node]] = {}
        self.value = value

    @property
    def has_value(self) -> bool:
        return self.value is not _NO_VALUE


class RunTrie:
    """A drop-in for ``mlx_lm.models.cache.PromptTrie`` (``LRUPromptCache._trie``)."""

    def __init__(self) -> None:
        self._roots: dict[Any, _Node] = {}

    def add(self, model: Any, tokens: Sequence[int], value: Any) -> Any:
        """Keep ``value`` at ``tokens``; the value it replaces, if any."""
        node = self._roots.setdefault(model, _Node())
        run = tuple(tokens)
        at = 0
        while at < len(run):
            edge = node.edges.get(run[at])
            if edge is None:
                node.edges[run[at]] = (run[at:], _Node(value))
                return None
            label, child = edge
            shared = _shared(label, run, at)
            if shared < len(label):  # the run leaves this edge part-way: split it there
                middle = _Node()
                middle.edges[label[shared]] = (label[shared:], child)
                node.edges[label[0]] = (label[:shared], middle)
                child = middle
            node, at = child, at + shared
        previous = node.value
        node.value = value
        return previous if previous is not _NO_VALUE else None

    def get(self, model: Any, tokens: Sequence[int]) -> Any:
        """The value kept at exactly ``tokens`` (``KeyError`` if none)."""
        node = self._path(model, tuple(tokens))[-1][1]
        if not node.has_value:
            raise KeyError(tuple(tokens[-1:]))
        return node.value

    def pop(self, model: Any, tokens: Sequence[int]) -> Any:
        """Remove and return the value at ``tokens``; nodes left without use go too."""
        path = self._path(model, tuple(tokens))
        node = path[-1][1]
        if not node.has_value:
            raise KeyError(tuple(tokens[-1:]))
        value, node.value = node.value, _NO_VALUE
        # Walk back up: drop empty leaves, and join a bare node's single run to its parent's.
        for index in range(len(path) - 1, 0, -1):
            key, node = path[index]
            parent = path[index - 1][1]
            label = parent.edges[key][0]
            if node.has_value or len(node.edges) > 1:
                break
            if not node.edges:
                del parent.edges[key]
                continue
            ((tail, grandchild),) = node.edges.values()
            parent.edges[key] = (label + tail, grandchild)
            break
        return value

    def pop_prefixes(self, model: Any, tokens: Sequence[int]) -> list[tuple[int, Any]]:
        """Remove the values at every shorter prefix of ``tokens`` (which must be kept):
        (prefix length, value) pairs, shortest first."""
        run = tuple(tokens)
        values = []
        node, at = self._roots[model], 0
        while at < len(run):
            if node.has_value:
                values.append((at, node.value))
                node.value = _NO_VALUE
            label, node = node.edges[run[at]]
            at += len(label)
        return values

    def search(self, model: Any, tokens: list[int]) -> Any:
        """``PromptTrie.search``: the exact entry, the longest shorter one and the shortest
        longer one along ``tokens``, and how many tokens the trie shares with it."""
        from mlx_lm.models.cache import PromptTrieResult

        root = self._roots.get(model)
        if root is None:
            return PromptTrieResult(model, None, None, None, 0)
        if not tokens and root.has_value:
            return PromptTrieResult(model, [], None, None, 0)
        run = tuple(tokens)
        node, at = root, 0
        last_index = -1  # the last token of the deepest entry on the way (PromptTrie's)
        rest: tuple[int, ...] = ()  # the part of an edge left when the walk stops inside it
        while at < len(run):
            edge = node.edges.get(run[at])
            if edge is None:
                break
            label, child = edge
            shared = _shared(label, run, at)
            at += shared
            if shared < len(label):
                rest, node = label[shared:], child
                break
            node = child
            if node.has_value:
                last_index = at - 1
        if last_index == len(run) - 1 >= 0:
            return PromptTrieResult(model, tokens, None, None, 0)
        shorter = tokens[: last_index + 1] if last_index > 0 else None
        longer = None
        if at > 0:
            extension = [] if not rest and node.has_value else [*rest, *_shortest(node)]
            longer = tokens[:at] + extension
        return PromptTrieResult(model, None, shorter, longer, at)

    def _path(self, model: Any, run: tuple[int, ...]) -> list[tuple[int, _Node]]:
        """The nodes from the root to exactly ``run``, each with its edge's first token."""
        node = self._roots[model]
        path: list[tuple[int, _Node]] = [(-1, node)]
        at = 0
        while at < len(run):
            label, node = node.edges[run[at]]
            if run[at : at + len(label)] != label:
                raise KeyError(run[at])
            at += len(label)
            path.append((label[0], node))
        return path


def _shared(label: tuple[int, ...], run: tuple[int, ...], at: int) -> int:
    """How many of ``label``'s tokens ``run`` has from ``at`` on."""
    return common_prefix(label, run[at : at + len(label)], len(label))


def _shortest(node: _Node) -> list[int]:
    """The tokens from ``node`` to its nearest value (a node always leads to one)."""
    if node.has_value:
        return []
    best: list[int] | None = None
    for label, child in node.edges.values():
        if best is not None and len(label) >= len(best):
            continue
        below = [*label, *_shortest(child)]
        if best is None or len(below) < len(best):
            best = below
    assert best is not None, "a node without a value has edges"
    return best
