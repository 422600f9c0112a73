"""No import circle in the gateway: between modules, or between the packages that hold them.

Run by ``make check`` beside import-linter (``lint-imports``), whose contracts fix the
direction between layers; this catches a circle anywhere, inside a layer too. It builds the
import graph with grimp (import-linter's graph library: every ``import`` statement, those
inside functions and under ``TYPE_CHECKING`` included) and looks for strongly connected
components:

* modules: every module of ``gateway`` with the modules it imports directly;
* packages: for every package, its children (subpackages squashed into one node each), an
  edge wherever a module under one imports a module under another.

No circle is allowed, none is excepted: the last one (``gateway.engines`` ⇄
``gateway.scheduler``) went when the request-level seam moved into ``gateway/seam``, below
both (the scheduler queues by the seam's ``Priority``; the local backend runs on the
scheduler).

    python ops/check_import_cycles.py      # exit 1 and the circles when there are any
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping

import grimp

PACKAGE = "gateway"


def strongly_connected(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The components of more than one node, and single nodes that import themselves
    (Tarjan's algorithm, iterative: the module graph is deep)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in graph:
                    continue
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1 or node in graph[node]:
                        found.append(sorted(component))
    return found


def module_graph(graph: grimp.ImportGraph) -> dict[str, set[str]]:
    return {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}


def package_graphs(graph: grimp.ImportGraph) -> dict[str, dict[str, set[str]]]:
    """For every package, the import graph between its children."""
    modules = module_graph(graph)
    result: dict[str, dict[str, set[str]]] = {}
    for package in sorted(graph.modules):
        children = graph.find_children(package)
        if len(children) < 2:
            continue

        def child_of(module: str, children: Iterable[str] = children) -> str | None:
            return next((c for c in children if module == c or module.startswith(c + ".")), None)

        edges: dict[str, set[str]] = {c: set() for c in children}
        for module, imported in modules.items():
            source = child_of(module)
            if source is None:
                continue
            for target in map(child_of, imported):
                if target is not None and target != source:
                    edges[source].add(target)
        result[package] = edges
    return result


def main() -> int:
    graph = grimp.build_graph(PACKAGE, include_external_packages=False)
    problems = [f"modules: {' ⇄ '.join(c)}" for c in strongly_connected(module_graph(graph))]
    packages = package_graphs(graph)
    for package, edges in packages.items():
        problems += [f"packages in {package}: {' ⇄ '.join(c)}" for c in strongly_connected(edges)]
    modules = len(graph.modules)
    if problems:
        print(f"import circles in {PACKAGE} ({modules} modules):", *problems, sep="\n  ")
        return 1
    print(f"no import circle in {PACKAGE}: {modules} modules, {len(packages)} packages")
    return 0


if __name__ == "__main__":
    sys.exit(main())
